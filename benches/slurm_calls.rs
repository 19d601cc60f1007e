//! Slurm call economy: `tunectl launch` of TRIALS (1,000) no-op trials on a
//! real single-node Slurm (tests/it/support/slurm.rs: two node names on this
//! machine), counting every `sbatch` and `squeue` call through wrappers
//! first on PATH. Not a timed test: it prints a table for
//! docs/benchmarks.md.
//!
//!   cargo bench --bench slurm_calls
//!   TRIALS=1000 POLL=5 MAX_IN_FLIGHT=100 cargo bench --bench slurm_calls
//!
//! Targets (issue): at most one `sbatch` per 100 ready trials, and exactly
//! one batched query per poll interval. Needs root, slurm-wlm and munge
//! (scripts/slurm.sh installs them).

// The bench uses part of the test harness's Slurm module.
#[allow(dead_code)]
#[path = "../tests/it/support/slurm.rs"]
mod slurm;
#[path = "lib/slurm_launch.rs"]
mod slurm_launch;

use std::path::Path;
use std::time::Instant;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn which(tool: &str) -> String {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let p = Path::new(dir).join(tool);
        if p.exists() {
            return p.display().to_string();
        }
    }
    panic!("{tool} not found: install slurm-wlm (scripts/slurm.sh)");
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not run
    // this (harness = false and no `--bench`): building it is the check.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let trials = env_u64("TRIALS", 1000);
    let poll = env_u64("POLL", 5);
    let in_flight = env_u64("MAX_IN_FLIGHT", 100);
    let cluster = slurm::Cluster::start(&[
        slurm::NodeSpec {
            name: "node-a",
            gpu_type: "",
            gpus: 0,
            gpu_name: "",
            cpus: 32,
        },
        slurm::NodeSpec {
            name: "node-b",
            gpu_type: "",
            gpus: 0,
            gpu_name: "",
            cpus: 32,
        },
    ]);
    let tmp = tempfile::Builder::new()
        .prefix("tsb")
        .tempdir()
        .expect("temp dir");
    let root = tmp.path();
    std::fs::write(
        root.join("study.yaml"),
        format!(
            r#"name: slurm-calls
knobs:
  i: {{kind: int, min: 0, max: {}, default: 0}}
trial:
  command: "printf '{{\"metrics\":{{\"t\":1}}}}' > \"$TUNECTL_RESULT\""
  timeout: 60s
objective: {{metric: t, better: lower}}
measurement: {{warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}}
"#,
            trials - 1
        ),
    )
    .expect("study");
    std::fs::write(
        root.join("inventory.yaml"),
        format!(
            "hosts:\n  - name: part\n    transport: slurm\n    poll_interval: {poll}s\n    max_jobs_in_flight: {in_flight}\n    shared_dir: {}\n",
            root.join("shared").display()
        ),
    )
    .expect("inventory");
    let shims = root.join("shims");
    std::fs::create_dir_all(&shims).expect("shims");
    for tool in ["sbatch", "squeue"] {
        let path = shims.join(tool);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\n# Counts calls (with a timestamp), then runs the real {tool}.\necho \"$(date +%s.%N) $*\" >>{log}\nexec {real} \"$@\"\n",
                log = root.join(format!("{tool}.log")).display(),
                real = which(tool)
            ),
        )
        .expect("shim");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let mut cmd = slurm_launch::launch_command(&cluster, root, "quiet");
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("{}:{path}", shims.display()));
    let started = Instant::now();
    let out = cmd.output().expect("launch");
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("ran {trials} trials ({trials} ok")),
        "{stderr}"
    );
    let stamps = |tool: &str| -> Vec<f64> {
        std::fs::read_to_string(root.join(format!("{tool}.log")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    };
    let sbatch = stamps("sbatch");
    let squeue = stamps("squeue");
    // Queries per poll interval, over the launch (first to last call).
    let (first, last) = (
        squeue.first().copied().unwrap_or(0.0),
        squeue.last().copied().unwrap_or(0.0),
    );
    let windows = ((last - first) / poll as f64).floor() as usize + 1;
    let mut per_window = vec![0usize; windows];
    for t in &squeue {
        let w = (((t - first) / poll as f64).floor() as usize).min(windows - 1);
        per_window[w] += 1;
    }
    let max_per_window = per_window.iter().copied().max().unwrap_or(0);
    let minutes = wall.as_secs_f64() / 60.0;
    println!(
        "| trials | max_jobs_in_flight | poll | wall | sbatch calls | trials per sbatch | squeue calls | squeue per minute (expected {}) | most squeue calls in one {poll} s window |",
        60 / poll.max(1)
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {trials} | {in_flight} | {poll} s | {:.1} s | {} | {:.1} | {} | {:.1} | {} |",
        wall.as_secs_f64(),
        sbatch.len(),
        trials as f64 / sbatch.len().max(1) as f64,
        squeue.len(),
        squeue.len() as f64 / minutes.max(1e-9),
        max_per_window
    );
    drop(cluster);
}
