//! How busy a mixed Slurm partition's GPUs stay: the racing study of
//! `benches/busy_share.sh RACE=1` (8 configs within 6 %, 5 % noise a run,
//! log-normal durations) launched through one slurm entry over a real
//! single-machine Slurm (tests/it/support/slurm.rs) with two node types:
//! `gpu-a` (FAKE H100s) and `gpu-b` (FAKE A100s, trials 1.4x slower), GPUS
//! GPUs each, so two host classes in one entry. Not a timed test: it
//! prints a table for docs/benchmarks.md.
//!
//!   cargo bench --bench slurm_busy
//!   GPUS=2 DURATION=1.0 MAX_REPEATS=12 cargo bench --bench slurm_busy
//!
//! It reports, per class (node type) over its own span (first start to
//! last end of its trials on the node, by the trial's own clock: each
//! prints when it began and ended):
//! - busy share: the trials' own time over GPUs x span. A Slurm attempt's
//!   `duration_s` also counts the time its job waited in Slurm's queue and
//!   the poll that saw it end, so it is not a measure of the GPU's time;
//! - the GPUs' idle time while jobs of the class waited in Slurm's queue
//!   (Slurm's part), and while none did (the launch had queued nothing);
//! - the span against its lower bound: max(run time / GPUs, the longest
//!   run).
//!
//! Target (issue): >= 97 % busy and <= 1.05x the bound per class. Needs
//! root, slurm-wlm and munge (scripts/slurm.sh installs them).

// The bench uses part of the test harness's Slurm module.
#[allow(dead_code)]
#[path = "../tests/it/support/slurm.rs"]
mod slurm;
#[path = "lib/slurm_launch.rs"]
mod slurm_launch;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The FAKE trial: sleeps a log-normal time (median DURATION seconds, the
/// A100 node's 1.4x longer) and reports a time whose truth is a smooth
/// function of (tile, split), with 5 % noise. No GPU work.
const TRIAL: &str = r#"#!/bin/sh
# FAKE trial for benches/slurm_busy.rs (no GPU work): sleeps and reports.
set -eu
began=$(date +%s.%N)
case "${SLURMD_NODENAME:-}" in gpu-b) factor=1.4 ;; *) factor=1.0 ;; esac
awk -v tile="$1" -v sp="$2" -v f="$factor" -v d="$3" -v seed="$$" 'BEGIN {
    srand(seed);
    l = log(tile / 32) / log(2);
    speed = 1 + 0.035 * l - 0.006 * l * l + 0.01 * (sp == 2);
    u1 = rand(); u2 = rand(); if (u1 < 1e-9) u1 = 1e-9;
    z = sqrt(-2 * log(u1)) * cos(6.283185307 * u2);
    dur = d * f * exp(0.5 * z);
    t = f / speed * (1 + 0.05 * (2 * rand() - 1));
    printf "%.6f %.6f\n", dur, t
}' >t.txt
sleep "$(cut -d' ' -f1 t.txt)"
printf '{"metrics":{"t":%s}}\n' "$(cut -d' ' -f2 t.txt)" >"$TUNECTL_RESULT"
echo "ran $began $(date +%s.%N)"
"#;

/// One attempt as the busy share reads it: when its trial began and
/// ended on its node, by the trial's own clock (its `ran` line).
struct Attempt {
    class: String,
    start: f64,
    end: f64,
    /// From the launcher starting the attempt (its job submitted, or
    /// queued ahead) to the trial beginning on its node, and from the
    /// trial's end to the launcher's end of the attempt (the poll that
    /// saw it, the result read back).
    to_node: f64,
    back: f64,
}

/// Every attempt record under `ledger`.
fn attempts(ledger: &Path) -> Vec<Attempt> {
    let mut out = Vec::new();
    let mut dirs = vec![ledger.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let in_trials = p.components().any(|c| c.as_os_str() == "trials");
            if !in_trials || p.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            let Ok(a) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
                continue;
            };
            let ran = a["stdout_tail"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .find_map(|l| {
                    let mut t = l.strip_prefix("ran ")?.split_whitespace();
                    Some((
                        t.next()?.parse::<f64>().ok()?,
                        t.next()?.parse::<f64>().ok()?,
                    ))
                });
            let Some((start, end)) = ran else {
                continue;
            };
            let time = |k: &str| {
                a[k].as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.timestamp_micros() as f64 / 1e6)
            };
            out.push(Attempt {
                class: a["host_class"].as_str().unwrap_or_default().to_string(),
                start,
                end,
                to_node: time("started_at").map_or(f64::NAN, |t| start - t),
                back: time("finished_at").map_or(f64::NAN, |t| t - end),
            });
        }
    }
    out
}

/// A class's idle GPU time over [`from`, `to`], in 10 ms steps: while
/// some of its jobs were queued (the launcher had started their attempts
/// and their trials had not begun), and while none was: Slurm's part and
/// the launch's.
fn idle_gpu_time(mine: &[&Attempt], gpus: u32, from: f64, to: f64) -> (f64, f64) {
    let (mut waited, mut nothing) = (0.0, 0.0);
    let step = 0.01;
    let mut t = from;
    while t < to {
        let running = mine.iter().filter(|a| a.start <= t && t < a.end).count() as f64;
        let queued = mine
            .iter()
            .filter(|a| a.to_node.is_finite() && a.start - a.to_node <= t && t < a.start)
            .count() as f64;
        let idle = (gpus as f64 - running).max(0.0);
        waited += step * idle.min(queued);
        nothing += step * (idle - idle.min(queued));
        t += step;
    }
    (waited, nothing)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not run
    // this (harness = false and no `--bench`): building it is the check.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let gpus: u32 = env_or("GPUS", 2);
    let duration: f64 = env_or("DURATION", 1.0);
    let max_repeats: u32 = env_or("MAX_REPEATS", 12);
    // The entry's `max_jobs_in_flight`: by default 8 a GPU, so that jobs
    // wait in Slurm's queue ahead of the GPUs.
    let in_flight: u32 = env_or("IN_FLIGHT", 8 * gpus);
    let node = |name, gpu_type, gpu_name| slurm::NodeSpec {
        name,
        gpu_type,
        gpus,
        gpu_name,
        cpus: 2 * gpus,
    };
    // SLURM_CONF_EXTRA: slurm.conf lines after the test cluster's own.
    let extra = std::env::var("SLURM_CONF_EXTRA").unwrap_or_default();
    let cluster = slurm::Cluster::start_with(
        &[
            node("gpu-a", "h100", "NVIDIA H100 80GB HBM3"),
            node("gpu-b", "a100", "NVIDIA A100-SXM4-80GB"),
        ],
        &extra,
    );
    let tmp = tempfile::Builder::new()
        .prefix("tsbusy")
        .tempdir()
        .expect("temp dir");
    let root = tmp.path();
    std::fs::write(root.join("trial.sh"), TRIAL).expect("trial");
    std::fs::write(
        root.join("study.yaml"),
        format!(
            r#"name: slurm-busy
knobs:
  tile: {{kind: int, values: [32, 64, 128, 256], default: 32}}
  split: {{kind: int, values: [1, 2], default: 1}}
trial:
  command: "sh {{{{ study_dir }}}}/trial.sh {{{{ tile }}}} {{{{ split }}}} {duration}"
  files: [trial.sh]
  timeout: 60s
objective: {{metric: t, unit: s, better: lower}}
measurement: {{warmup: 0, repeats: 3, max_repeats: {max_repeats}, anchor_every: 0}}
"#
        ),
    )
    .expect("study");
    // One entry over the whole (mixed) partition, a GPU a job.
    std::fs::write(
        root.join("inventory.yaml"),
        format!(
            "hosts:\n  - name: gpus\n    transport: slurm\n    gres: \"gpu:1\"\n    poll_interval: 1s\n    max_jobs_in_flight: {}\n    shared_dir: {}\n",
            in_flight,
            root.join("shared").display()
        ),
    )
    .expect("inventory");
    let mut cmd = slurm_launch::launch_command(&cluster, root, "plain");
    let started = Instant::now();
    let out = cmd.output().expect("launch");
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)),
        "launch failed:\n{stderr}"
    );
    for l in stderr.lines() {
        if l.contains("[VERDICT]") || l.contains("[DRAFT]") || l.starts_with("ran ") {
            println!("{l}");
        }
    }
    let rounds = stderr.matches("racing in bucket").count();
    let queued_out = stderr.matches("queued while").count();
    println!("racing rounds: {rounds}, queued while runs were out: {queued_out}");

    let all = attempts(&root.join("ledger"));
    assert!(!all.is_empty(), "no attempts in the ledger");
    let mut classes: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for a in &all {
        classes.entry(a.class.as_str()).or_default().push(a);
    }
    println!(
        "\n{} attempts, launch {wall:.1} s; {gpus} GPUs a node, trials of {duration} s median",
        all.len()
    );
    println!(
        "| class | attempts | span, s | busy share (trial's own run) | idle while its jobs waited in Slurm's queue | idle with none queued | bound, s | span / bound |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (class, mine) in &classes {
        let start = mine.iter().map(|a| a.start).fold(f64::INFINITY, f64::min);
        let end = mine.iter().map(|a| a.end).fold(0.0, f64::max);
        let span = end - start;
        let run: f64 = mine.iter().map(|a| a.end - a.start).sum();
        let longest = mine.iter().map(|a| a.end - a.start).fold(0.0, f64::max);
        let bound = (run / gpus as f64).max(longest);
        let (waited, nothing) = idle_gpu_time(mine, gpus, start, end);
        let share = |t: f64| 100.0 * t / (gpus as f64 * span);
        println!(
            "| {class} | {} | {span:.1} | {:.1} % | {:.1} % | {:.1} % | {bound:.1} | {:.3} |",
            mine.len(),
            share(run),
            share(waited),
            share(nothing),
            span / bound
        );
    }
    let median = |f: fn(&Attempt) -> f64| {
        let mut v: Vec<f64> = all.iter().map(f).filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    println!(
        "median from the launcher's start of an attempt to its trial beginning: {:.2} s; \
         from the trial's end to the attempt's end: {:.2} s",
        median(|a| a.to_node),
        median(|a| a.back)
    );
    drop(cluster);
}
