use super::*;

#[test]
fn unreported_states_map_to_failure_classes_or_loss() {
    assert!(matches!(
        unreported("TIMEOUT", "gpu-a", false),
        Unreported::Failed {
            timed_out: true,
            ..
        }
    ));
    match unreported("OUT_OF_MEMORY", "gpu-a", false) {
        Unreported::Failed { timed_out, detail } => {
            assert!(!timed_out);
            let c = crate::decide::gate::Classifier::default();
            let (class, _) = c
                .classify(
                    &ExitInfo {
                        code: None,
                        signal: Some(9),
                    },
                    false,
                    &detail,
                    60.0,
                )
                .expect("a failure");
            assert_eq!(class.as_str(), "oom");
        }
        other => panic!("{other:?}"),
    }
    for lost in ["NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "VANISHED"] {
        assert!(
            matches!(unreported(lost, "", false), Unreported::Lost(_)),
            "{lost}"
        );
    }
    assert_eq!(
        unreported("CANCELLED", "", true),
        Unreported::Lost(TransportError::StoppedByLauncher)
    );
    match unreported("CANCELLED", "gpu-b", false) {
        Unreported::Lost(r) => assert_eq!(
            r.to_string(),
            "slurm: the task was cancelled outside tunectl on node gpu-b"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn final_states() {
    for s in ["COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED"] {
        assert!(is_final(s));
    }
    for s in [
        "PENDING",
        "RUNNING",
        "COMPLETING",
        "CONFIGURING",
        "REQUEUED",
    ] {
        assert!(!is_final(s));
    }
}

#[test]
fn the_default_template_renders_every_option() {
    let cfg = SlurmHost {
        login: "local".into(),
        partition: Some("gpu".into()),
        account: Some("acct".into()),
        qos: None,
        gres: Some("gpu:h100:1".into()),
        constraint: Some("h100".into()),
        time_limit: None,
        sbatch_args: vec!["--exclusive".into()],
        max_jobs_in_flight: 100,
        array_throttle: Some(8),
        poll_interval: Duration::from_secs(30),
        shared_dir: None,
        batch_template: None,
    };
    let t = SlurmTransport::new("p", cfg, Login::Local, None, false);
    if let Ok(mut s) = t.inner.study.write() {
        *s = Some("st".into());
    }
    let text = t
        .inner
        .render_batch("/shared/st/batches/b 1", 12, "7", "b1")
        .expect("render");
    for line in [
        "#SBATCH --job-name=tunectl-st",
        "#SBATCH --comment=tunectl:study=st:batch=b1:host=p",
        "#SBATCH --array=0-11%8",
        "#SBATCH --time=7",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=acct",
        "#SBATCH --gres=gpu:h100:1",
        "#SBATCH --constraint=h100",
        "#SBATCH --exclusive",
        "#SBATCH --no-requeue",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    assert!(!text.contains("--qos"), "{text}");
    // A newline anywhere would be a line of its own: refused.
    let mut cfg = t.inner.cfg.clone();
    cfg.partition = Some("gpu\n#SBATCH --uid=0".into());
    let bad = SlurmTransport::new("p", cfg, Login::Local, None, false);
    let err = bad
        .inner
        .render_batch("/s", 1, "7", "b1")
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("partition") && err.contains("control character"),
        "{err}"
    );
    let mut cfg = t.inner.cfg.clone();
    cfg.sbatch_args.push("--x\nrm -rf ~".into());
    let bad = SlurmTransport::new("p", cfg, Login::Local, None, false);
    assert!(bad.inner.render_batch("/s", 1, "7", "b1").is_err());
    assert!(
        text.contains("exec /bin/sh '/shared/st/batches/b 1'/t\"$SLURM_ARRAY_TASK_ID\".sh"),
        "{text}"
    );
}

/// Two entries sharing a shared directory may submit at the same
/// microsecond with the same count of batches: their batch directories
/// must still differ (they once did not, and one entry's tasks ran the
/// other's `batch.sh`).
#[test]
fn batches_of_two_entries_at_the_same_moment_get_their_own_directories() {
    let at = chrono::Utc::now();
    let ids: std::collections::BTreeSet<String> = (0..64).map(|_| batch_id(at, 1)).collect();
    assert_eq!(ids.len(), 64, "{ids:?}");
    for id in &ids {
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b)),
            "{id}"
        );
    }
}
