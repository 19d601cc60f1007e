//! How the commands reach the hosts of an inventory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::CliError;
use crate::spec::{Inventory, Transport};
use crate::transport::local::LocalTransport;
use crate::transport::ssh::SshTransport;

/// The transport that reaches an inventory host.
pub fn transport_for(
    h: &crate::spec::Host,
    inv: &Inventory,
    work_root: &Path,
    control_dir: &Path,
    keep_workdirs: bool,
) -> Result<Arc<dyn crate::transport::Transport>, CliError> {
    Ok(match &h.transport {
        Transport::Ssh(cfg) => Arc::new(SshTransport::new(
            &h.name,
            cfg.clone(),
            control_dir.to_path_buf(),
            keep_workdirs,
        )),
        Transport::Slurm(_) => Arc::new(slurm_transport(h, inv, control_dir, keep_workdirs)?),
        Transport::Local => Arc::new(LocalTransport {
            work_root: work_root.to_path_buf(),
            keep_workdirs,
        }),
    })
}

/// The transport of a slurm entry of the inventory (its login host and
/// batch template resolved).
pub fn slurm_transport(
    h: &crate::spec::Host,
    inv: &Inventory,
    control_dir: &Path,
    keep_workdirs: bool,
) -> Result<crate::transport::slurm::SlurmTransport, CliError> {
    let Transport::Slurm(cfg) = &h.transport else {
        return Err(CliError::Invalid(format!(
            "host `{}` is not a slurm entry",
            h.name
        )));
    };
    let login = match cfg.login.as_str() {
        "local" => crate::transport::slurm::Login::Local,
        name => match inv.host(name).map(|l| &l.transport) {
            Some(Transport::Ssh(ssh)) => crate::transport::slurm::Login::Ssh(Arc::new(
                SshTransport::new(name, ssh.clone(), control_dir.to_path_buf(), false),
            )),
            _ => {
                return Err(CliError::Invalid(format!(
                    "host `{}`: login `{name}` is not an ssh host of the inventory",
                    h.name
                )));
            }
        },
    };
    let template = match &cfg.batch_template {
        Some(p) => {
            let base = inv
                .source
                .as_deref()
                .and_then(Path::parent)
                .unwrap_or(Path::new("."));
            let path = base.join(p);
            Some(
                crate::safe_read::read_text(&path, crate::safe_read::MAX_TEMPLATE_FILE_BYTES)
                    .map_err(|e| {
                        CliError::Invalid(format!(
                            "host `{}`: batch_template {}: {e}",
                            h.name,
                            path.display()
                        ))
                    })?,
            )
        }
        None => None,
    };
    Ok(crate::transport::slurm::SlurmTransport::new(
        &h.name,
        cfg.clone(),
        login,
        template,
        keep_workdirs,
    ))
}

/// Where SSH master connections keep their control sockets: a short
/// private directory (socket paths are limited to about 100 bytes).
pub fn ssh_control_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    // SAFETY: getuid(2) cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = PathBuf::from(format!("/tmp/tunectl-ssh-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    use std::os::unix::fs::MetadataExt;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} must be a directory of yours that only you can read (mode 700)",
            dir.display()
        )));
    }
    Ok(dir)
}
