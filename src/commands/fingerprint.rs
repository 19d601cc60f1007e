//! `tunectl fingerprint`: probe this machine (or every host of an
//! inventory) and print its fingerprint and host class.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::hosts::{ssh_control_dir, transport_for};
use super::{CliError, failed, print_json, schema};
use crate::spec::{Inventory, Study};
use crate::{fingerprint, yaml_out};

#[derive(clap::Args, Debug)]
pub struct FingerprintArgs {
    /// Also probe the tool versions this study asks for.
    #[arg(long)]
    pub study: Option<std::path::PathBuf>,
    // `text` prints YAML.
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
    /// Same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Probe every host of this inventory (local, ssh, Slurm) instead of this
    /// machine, and group them into host classes.
    #[arg(long, short)]
    pub inventory: Option<std::path::PathBuf>,
}

/// Probe and print, as YAML or JSON.
pub async fn run(a: FingerprintArgs) -> Result<(), CliError> {
    let tools = match &a.study {
        Some(p) => Study::load(p)?.tools,
        None => BTreeMap::new(),
    };
    let json = a.output.json(a.json);
    if let Some(path) = &a.inventory {
        return fingerprint_inventory(path, &tools, json).await;
    }
    let fp = fingerprint::probe_local(&tools).await.map_err(failed)?;
    let mut doc = serde_json::json!({
        "host_class": fp.host_class(),
        "class_label": fp.class_label(),
        "fingerprint_hash": fp.hash(),
        "fingerprint": fp,
    });
    if json {
        doc["schema"] = schema::FINGERPRINT.into();
        print_json(&doc)?;
    } else {
        crate::term::out(&crate::term::escape_block(&yaml_out::to_yaml(&doc)));
    }
    Ok(())
}

/// `fingerprint --inventory`: probe every host at once; hosts grouped by
/// class. A host that does not answer is listed with why (exit 1).
async fn fingerprint_inventory(
    path: &Path,
    tools: &BTreeMap<String, String>,
    json: bool,
) -> Result<(), CliError> {
    let inv = Inventory::load(path)?;
    let control_dir = ssh_control_dir().map_err(failed)?;
    let work_root = std::env::temp_dir().join("tunectl-work");
    let mut transports: Vec<(String, Arc<dyn crate::transport::Transport>)> = Vec::new();
    for h in &inv.hosts {
        transports.push((
            h.name.clone(),
            transport_for(h, &inv, &work_root, &control_dir, false)?,
        ));
    }
    let probes = futures::future::join_all(transports.iter().map(|(_, t)| t.probe(tools))).await;
    let mut classes: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let mut down = Vec::new();
    for ((name, t), probe) in transports.iter().zip(probes) {
        t.close().await;
        match probe {
            Ok(fp) => {
                let entry = classes.entry(fp.host_class()).or_insert_with(|| {
                    serde_json::json!({
                        "host_class": fp.host_class(),
                        "class_label": fp.class_label(),
                        "hosts": [],
                    })
                });
                if let Some(hosts) = entry["hosts"].as_array_mut() {
                    hosts.push(serde_json::json!({
                        "host": name,
                        "fingerprint_hash": fp.hash(),
                        "fingerprint": fp,
                    }));
                }
            }
            Err(e) => down.push(serde_json::json!({"host": name, "error": e.to_string()})),
        }
    }
    let mut doc = serde_json::json!({
        "classes": classes.into_values().collect::<Vec<_>>(),
        "unreachable": down,
    });
    if json {
        doc["schema"] = schema::FINGERPRINT_INVENTORY.into();
        print_json(&doc)?;
    } else {
        crate::term::out(&crate::term::escape_block(&yaml_out::to_yaml(&doc)));
    }
    if down.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "{} host(s) did not answer",
            down.len()
        )))
    }
}
