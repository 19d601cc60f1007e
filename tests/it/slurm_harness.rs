//! Checks of the Slurm test harness (tests/it/support/slurm.rs) against real
//! slurmctld/slurmd daemons: what the Slurm transport tests rely on. Needs
//! root, slurm-wlm and munge (scripts/test.sh installs them).

use std::fs;
use std::time::Duration;

use crate::support::slurm::{self, Cluster, NodeSpec};

const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";

/// Two host classes: gpu-a (H100) and gpu-b (A100), one FAKE GPU each.
fn two_nodes(cpus: u32) -> [NodeSpec; 2] {
    [
        NodeSpec {
            name: "gpu-a",
            gpu_type: "h100",
            gpus: 1,
            gpu_name: H100,
            cpus,
        },
        NodeSpec {
            name: "gpu-b",
            gpu_type: "a100",
            gpus: 1,
            gpu_name: A100,
            cpus,
        },
    ]
}

const SHORT: Duration = Duration::from_secs(20);

fn read(path: &std::path::Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn array_job_runs_every_task_on_both_nodes() {
    let c = Cluster::start(&two_nodes(1));
    let out = c.work.join("arr_%a.out");
    let id = c.sbatch(&[
        "--array=0-3",
        "-o",
        out.to_str().expect("utf-8 path"),
        "--wrap",
        "echo task=$SLURM_ARRAY_TASK_ID node=$SLURMD_NODENAME; sleep 0.5",
    ]);
    let rows = c.wait_finished(&id, SHORT);
    let mut ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    let want: Vec<String> = (0..4).map(|t| format!("{id}_{t}")).collect();
    assert_eq!(ids, want, "squeue rows: {rows:?}");
    assert!(rows.iter().all(|r| r.state == "COMPLETED"), "{rows:?}");
    let mut nodes = std::collections::BTreeSet::new();
    for t in 0..4 {
        let text = read(&c.work.join(format!("arr_{t}.out")));
        assert!(
            text.contains(&format!("task={t} ")),
            "task {t} wrote {text:?}"
        );
        nodes.insert(text.trim().rsplit('=').next().unwrap_or("").to_string());
    }
    // One CPU per node and four tasks: both nodes ran some.
    assert_eq!(
        nodes.into_iter().collect::<Vec<_>>(),
        ["gpu-a", "gpu-b"],
        "nodes that ran the tasks"
    );

    // scontrol: one line per task, with ArrayJobId/ArrayTaskId; the last
    // task to be split off keeps the array's own id as JobId.
    let shown = c.show_job(&id);
    assert_eq!(shown.len(), 4, "{shown:?}");
    for j in &shown {
        assert_eq!(j.get("ArrayJobId").map(String::as_str), Some(id.as_str()));
        assert_eq!(j.get("JobState").map(String::as_str), Some("COMPLETED"));
    }

    // sacct -c (jobcomp/filetxt) names array tasks by their own job ids,
    // not "<array>_<task>", and complains about the Array* fields on stderr.
    let sacct = c.run(
        "sacct",
        &["-c", "-P", "-n", "--format=JobID,State,ExitCode,NodeList"],
    );
    assert!(sacct.ok(), "sacct -c: {sacct:?}");
    let raw: Vec<&str> = rows.iter().map(|r| r.raw_id.as_str()).collect();
    let lines: Vec<&str> = sacct.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "sacct -c: {}", sacct.stdout);
    for l in &lines {
        let f: Vec<&str> = l.split('|').collect();
        assert!(raw.contains(&f[0]), "sacct id {} not among {raw:?}", f[0]);
        assert_eq!(&f[1..3], ["COMPLETED", "0:0"], "{l}");
    }
}

#[test]
fn gpu_jobs_see_their_nodes_fake_gpu() {
    let c = Cluster::start(&two_nodes(1));
    let script = "echo cvd=${CUDA_VISIBLE_DEVICES-unset}; \
                  nvidia-smi --query-gpu=name --format=csv,noheader";
    let mut jobs = Vec::new();
    for (node, args) in [
        ("gpu-b", vec!["-w", "gpu-b", "--gres=gpu:1"]),
        ("gpu-a", vec!["-w", "gpu-a", "--gres=gpu:h100:1"]),
        ("a100-by-feature", vec!["--constraint=a100", "--gres=gpu:1"]),
        ("gpu-a-no-gres", vec!["-w", "gpu-a", "--export=NONE"]),
    ] {
        let out = c.work.join(format!("{node}.out"));
        let mut a = args.clone();
        a.extend(["-o", out.to_str().expect("utf-8 path"), "--wrap", script]);
        jobs.push((node, c.sbatch(&a), out));
    }
    for (node, id, out) in &jobs {
        let rows = c.wait_finished(id, SHORT);
        assert_eq!(
            rows[0].state,
            "COMPLETED",
            "{node}: {rows:?}; {}",
            read(out)
        );
        let text = read(out);
        let (cvd, gpu) = match *node {
            "gpu-b" | "a100-by-feature" => ("cvd=0", A100),
            "gpu-a" => ("cvd=0", H100),
            _ => ("cvd=unset", H100),
        };
        assert_eq!(text, format!("{cvd}\n{gpu}\n"), "job on {node}");
    }
}

#[test]
fn job_end_states_and_pending_on_a_down_node() {
    let c = Cluster::start(&two_nodes(1));
    let failed = c.sbatch(&["-w", "gpu-a", "-o", "/dev/null", "--wrap", "exit 3"]);
    let cancelled = c.sbatch(&["-w", "gpu-b", "-o", "/dev/null", "--wrap", "sleep 60"]);
    c.wait_state(&cancelled, "RUNNING", SHORT);
    c.run_ok("scancel", &[&cancelled]);

    let f = c.wait_finished(&failed, SHORT);
    assert_eq!(f[0].state, "FAILED", "{f:?}");
    assert_eq!(f[0].reason, "NonZeroExitCode", "{f:?}");
    let shown = c.show_job(&failed);
    assert_eq!(shown[0].get("ExitCode").map(String::as_str), Some("3:0"));
    let x = c.wait_finished(&cancelled, SHORT);
    assert_eq!(x[0].state, "CANCELLED", "{x:?}");

    // A job for a down node waits, with the reason naming the node.
    c.node_down("gpu-a");
    assert_eq!(c.node_state("gpu-a"), "down");
    let pinned = c.sbatch(&["-w", "gpu-a", "-o", "/dev/null", "--wrap", "true"]);
    let by_feature = c.sbatch(&["--constraint=h100", "-o", "/dev/null", "--wrap", "true"]);
    for id in [&pinned, &by_feature] {
        let row = c.wait_for("a reason for the pending job", SHORT, || {
            c.job(id)
                .into_iter()
                .find(|r| r.state == "PENDING" && r.reason.starts_with("ReqNodeNotAvail"))
        });
        assert_eq!(row.reason, "ReqNodeNotAvail, UnavailableNodes:gpu-a");
    }
    // It stays down (ReturnToService=1) ...
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(c.node_state("gpu-a"), "down");
    // ... until resumed; then the waiting jobs run.
    c.node_resume("gpu-a");
    assert!(c.wait_idle(SHORT) || c.node_state("gpu-a") == "allocated");
    for id in [&pinned, &by_feature] {
        let rows = c.wait_finished(id, SHORT);
        assert_eq!(rows[0].state, "COMPLETED", "{rows:?}");
        assert_eq!(rows[0].nodes, "gpu-a", "{rows:?}");
    }
    assert!(
        c.wait_idle(SHORT),
        "nodes idle again: {:?}",
        c.node_states()
    );

    // sacct -c: one record per finished job.
    let sacct = c.run_ok(
        "sacct",
        &["-c", "-P", "-n", "--format=JobID,State,ExitCode"],
    );
    for want in [
        format!("{failed}|FAILED|3:0"),
        format!("{cancelled}|CANCELLED|0:0"),
        format!("{pinned}|COMPLETED|0:0"),
    ] {
        assert!(
            sacct.lines().any(|l| l == want),
            "{want} in sacct -c:\n{sacct}"
        );
    }
}

#[test]
fn node_down_requeues_running_jobs_or_fails_them_with_no_requeue() {
    let c = Cluster::start(&two_nodes(2));
    // Exits at once when run again after a requeue.
    let script = "echo run=${SLURM_RESTART_COUNT:-0}; \
                  [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ] && exit 0; sleep 60";
    let rq_out = c.work.join("requeue.out");
    let requeue = c.sbatch(&[
        "-w",
        "gpu-a",
        "-o",
        rq_out.to_str().expect("utf-8 path"),
        "--wrap",
        script,
    ]);
    let no_requeue = c.sbatch(&[
        "-w",
        "gpu-a",
        "--no-requeue",
        "-o",
        "/dev/null",
        "--wrap",
        script,
    ]);
    c.wait_state(&requeue, "RUNNING", SHORT);
    c.wait_state(&no_requeue, "RUNNING", SHORT);

    c.node_down("gpu-a");
    let failed = c.wait_finished(&no_requeue, SHORT);
    assert_eq!(failed[0].state, "NODE_FAIL", "{failed:?}");
    assert_eq!(failed[0].reason, "NodeDown", "{failed:?}");
    // A requeued job is PENDING at once; once the killed run has finished
    // completing, slurmctld sets its begin time 121 s ahead (the credential
    // expiry window + 1) and the scheduler gives the reason BeginTime.
    // Moving StartTime earlier before that point does not stick.
    let requeued = c.wait_for("the requeued job to wait for its begin time", SHORT, || {
        c.job(&requeue)
            .into_iter()
            .find(|r| r.state == "PENDING" && r.reason == "BeginTime")
    });
    assert_eq!(requeued.nodes, "", "{requeued:?}");
    let shown = c.show_job(&requeue);
    let field = |k: &str| shown[0].get(k).cloned().unwrap_or_default();
    assert_eq!(field("Restarts"), "1");
    assert_eq!(field("Requeue"), "1");
    let delay = epoch(&field("EligibleTime")) - epoch(&field("SubmitTime"));
    assert!(
        (115..=125).contains(&delay),
        "requeue delay {delay} s: {shown:?}"
    );
    // The run that was killed is in sacct -c as NODE_FAIL already.
    let sacct = c.run_ok("sacct", &["-c", "-P", "-n", "--format=JobID,State"]);
    assert!(
        sacct.lines().any(|l| l == format!("{requeue}|NODE_FAIL")),
        "sacct -c:\n{sacct}"
    );
    assert_eq!(c.node_state("gpu-a"), "down");

    c.node_resume("gpu-a");
    assert!(
        c.wait_idle(SHORT),
        "nodes idle after resume: {:?}",
        c.node_states()
    );
    // Skip the requeue delay; the job runs again (and exits at once).
    c.run_ok(
        "scontrol",
        &["update", &format!("jobid={requeue}"), "StartTime=now"],
    );
    let done = c.wait_finished(&requeue, SHORT);
    assert_eq!(done[0].state, "COMPLETED", "{done:?}");
    // The output file was truncated when the job started again.
    assert_eq!(read(&rq_out), "run=1\n");
    let sacct = c.run_ok("sacct", &["-c", "-P", "-n", "--format=JobID,State"]);
    let records: Vec<&str> = sacct
        .lines()
        .filter(|l| l.starts_with(&format!("{requeue}|")))
        .collect();
    assert_eq!(
        records,
        [
            format!("{requeue}|NODE_FAIL"),
            format!("{requeue}|COMPLETED")
        ],
        "sacct -c:\n{sacct}"
    );
}

#[test]
fn two_clusters_run_side_by_side_and_clean_up() {
    let started = std::time::Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| Cluster::start(&two_nodes(1)));
        let b = s.spawn(|| Cluster::start(&two_nodes(1)));
        (
            a.join().expect("starting cluster a"),
            b.join().expect("starting cluster b"),
        )
    });
    eprintln!(
        "two clusters started in parallel in {:?}",
        started.elapsed()
    );
    assert_ne!(a.ctld_port, b.ctld_port);
    assert_ne!(a.first_job_id, b.first_job_id);
    let script = "echo $SLURM_CLUSTER_NAME $SLURMD_NODENAME; sleep 300";
    let mut ids = Vec::new();
    for c in [&a, &b] {
        let out = c.work.join("who.out");
        let id = c.sbatch(&[
            "-w",
            "gpu-b",
            "-o",
            out.to_str().expect("utf-8 path"),
            "--wrap",
            script,
        ]);
        c.wait_state(&id, "RUNNING", SHORT);
        let text = c.wait_for("the job's output", SHORT, || {
            let t = fs::read_to_string(&out).ok()?;
            (!t.is_empty()).then_some(t)
        });
        assert_eq!(text, format!("{} gpu-b\n", c.name));
        ids.push(id);
    }
    for (c, id) in [(&a, &ids[0]), (&b, &ids[1])] {
        // Each cluster knows only its own job.
        let jobs = c.jobs();
        assert_eq!(jobs.len(), 1, "{}: {jobs:?}", c.name);
        assert_eq!(&jobs[0].raw_id, id);
    }
    // The clusters' processes, the running jobs' included, are told apart:
    // slurmctld, slurmscriptd, 2 slurmd, slurmstepd, the job's shell, sleep.
    let pa = a.processes();
    let pb = b.processes();
    assert!(pa.len() >= 7, "cluster a's processes: {pa:?}");
    assert!(pa.iter().all(|p| !pb.contains(p)), "{pa:?} vs {pb:?}");
    let a_dir = a.dir.path().to_path_buf();
    let t = std::time::Instant::now();
    drop(a);
    eprintln!(
        "dropping a cluster with a running job took {:?}",
        t.elapsed()
    );
    // Dropping a cluster leaves none of its processes (the sleeping job
    // included), and the other cluster running.
    let left = slurm::cluster_processes(&a_dir);
    assert!(left.is_empty(), "processes of a left after drop: {left:?}");
    assert!(!a_dir.exists());
    assert_eq!(b.job(&ids[1])[0].state, "RUNNING");
}

/// `--time=0:01` ends as TIMEOUT after 60–90 s (the smallest limit is one
/// minute and slurmctld checks limits every 30 s): too slow for every run.
#[test]
#[ignore = "takes about 80 s; run with --ignored"]
fn time_limit_gives_timeout() {
    let c = Cluster::start(&two_nodes(1));
    let id = c.sbatch(&["--time=0:01", "-o", "/dev/null", "--wrap", "sleep 300"]);
    c.wait_state(&id, "RUNNING", SHORT);
    let t = std::time::Instant::now();
    let rows = c.wait_finished(&id, Duration::from_secs(150));
    assert_eq!(rows[0].state, "TIMEOUT", "{rows:?}");
    assert_eq!(rows[0].reason, "TimeLimit", "{rows:?}");
    let sacct = c.run_ok(
        "sacct",
        &["-c", "-P", "-n", "--format=JobID,State,ExitCode"],
    );
    eprintln!("TIMEOUT after {:?}; sacct -c: {sacct}", t.elapsed());
    assert!(
        sacct.lines().any(|l| l == format!("{id}|TIMEOUT|0:0")),
        "{sacct}"
    );
}

/// "2026-11-29T21:14:42" (scontrol's local time; only differences are
/// used) -> seconds since 1970-01-01T00:00:00 of that calendar.
fn epoch(t: &str) -> i64 {
    let n: Vec<i64> = t
        .split(['-', 'T', ':'])
        .map(|x| x.parse().unwrap_or_else(|e| panic!("time {t:?}: {e}")))
        .collect();
    assert_eq!(n.len(), 6, "time {t:?}");
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m, d) = (if n[1] <= 2 { n[0] - 1 } else { n[0] }, n[1], n[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    days * 86400 + n[3] * 3600 + n[4] * 60 + n[5]
}

#[test]
fn epoch_counts_seconds_since_1970() {
    assert_eq!(epoch("1970-01-01T00:00:00"), 0);
    assert_eq!(epoch("2026-11-29T21:14:42"), 1_795_986_882);
    assert_eq!(
        epoch("2024-03-01T00:00:00") - epoch("2024-02-28T00:00:00"),
        2 * 86400
    );
}
