//! What the Slurm benches share: `tunectl launch` of the study in a
//! bench's folder on a test cluster (`crate::slurm`, the test harness's
//! module), with the release binary (`TUNECTL`, or built here).

use std::path::Path;
use std::process::Command;

/// `tunectl launch --yes --progress <progress>` of `<root>/study.yaml`
/// over `<root>/inventory.yaml`, ledger `<root>/ledger`, in `root`, with
/// the cluster's environment.
pub fn launch_command(cluster: &crate::slurm::Cluster, root: &Path, progress: &str) -> Command {
    let tunectl = std::env::var("TUNECTL").unwrap_or_else(|_| {
        let status = Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args(["build", "--release", "--bin", "tunectl", "--quiet"])
            .status()
            .expect("cargo build");
        assert!(status.success());
        let target = std::env::var("CARGO_TARGET_DIR")
            .unwrap_or_else(|_| format!("{}/target", env!("CARGO_MANIFEST_DIR")));
        format!("{target}/release/tunectl")
    });
    let mut cmd = Command::new(&tunectl);
    cmd.args(["launch", "--yes", "--progress", progress, "--inventory"])
        .arg(root.join("inventory.yaml"))
        .arg("--ledger")
        .arg(root.join("ledger"))
        .arg(root.join("study.yaml"))
        .current_dir(root);
    for (k, v) in cluster.env() {
        cmd.env(k, v);
    }
    cmd
}
