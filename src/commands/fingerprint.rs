//! `tunectl fingerprint`: probe this machine (or every host of an
//! inventory) and print its fingerprint and host class.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::hosts::{ssh_control_dir, transport_for};
use super::{CliError, failed, print_json, schema};
use crate::fingerprint::{ClassKey, Fingerprint};
use crate::spec::{Inventory, Study};
use crate::transport::{Discovery, Transport, TransportError};
use crate::{fingerprint, yaml_out};

#[derive(clap::Args, Debug)]
pub struct FingerprintArgs {
    /// Also probe the tool versions this study asks for, and class hosts by
    /// its `fingerprint.class_key` (as its launches class them).
    #[arg(long)]
    pub study: Option<std::path::PathBuf>,
    // `text` prints YAML.
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
    /// Same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Probe every host of this inventory (local, ssh, Slurm: each node type
    /// of a mixed partition) instead of this machine, and group them into
    /// host classes.
    #[arg(long, short)]
    pub inventory: Option<std::path::PathBuf>,
}

/// Probe and print, as YAML or JSON.
pub async fn run(a: FingerprintArgs) -> Result<(), CliError> {
    let (tools, key) = match &a.study {
        Some(p) => {
            let study = Study::load(p)?;
            (study.tools, study.class_key)
        }
        None => (BTreeMap::new(), ClassKey::default()),
    };
    let json = a.output.json(a.json);
    if let Some(path) = &a.inventory {
        return fingerprint_inventory(path, &tools, &key, json).await;
    }
    let fp = fingerprint::probe_local(&tools).await.map_err(failed)?;
    let mut doc = serde_json::json!({
        "host_class": fp.host_class_under(&key),
        "class_label": fp.class_label_under(&key),
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

/// What one inventory entry turned out to be: one host, or the parts of a
/// mixed Slurm partition (one per host class of its node types).
type Found = Result<Vec<(String, Vec<String>, Fingerprint)>, TransportError>;

/// Probe one entry as a launch would: a Slurm entry without `constraint`
/// whose partition has several node types is probed once per type and
/// shown as its parts (`<entry>.<tag>`, with their nodes).
async fn probe_entry(
    name: &str,
    t: &Arc<dyn Transport>,
    tools: &BTreeMap<String, String>,
    key: &ClassKey,
) -> Found {
    // The id the probe jobs run under (`tunectl-probe`): a fingerprint is
    // no launch of a study, whatever study names the tools and key.
    let found = match t.discover("probe", tools, key).await? {
        Discovery::Probe => vec![(name.to_string(), Vec::new(), t.probe(tools).await?)],
        Discovery::Probed(fp) => vec![(name.to_string(), Vec::new(), *fp)],
        Discovery::Parts(parts) => {
            let mut out = Vec::new();
            for p in parts {
                p.transport.close().await;
                out.push((format!("{name}.{}", p.suffix), p.nodes, p.fingerprint));
            }
            out
        }
    };
    Ok(found)
}

/// `fingerprint --inventory`: probe every host at once; hosts grouped by
/// class (under the study's `fingerprint.class_key` with `--study`). A
/// host that does not answer is listed with why (exit 1).
async fn fingerprint_inventory(
    path: &Path,
    tools: &BTreeMap<String, String>,
    key: &ClassKey,
    json: bool,
) -> Result<(), CliError> {
    let inv = Inventory::load(path)?;
    let control_dir = ssh_control_dir().map_err(failed)?;
    let work_root = std::env::temp_dir().join("tunectl-work");
    let mut transports: Vec<(String, Arc<dyn Transport>)> = Vec::new();
    for h in &inv.hosts {
        transports.push((
            h.name.clone(),
            transport_for(h, &inv, &work_root, &control_dir, false)?,
        ));
    }
    let probes = futures::future::join_all(
        transports
            .iter()
            .map(|(name, t)| probe_entry(name, t, tools, key)),
    )
    .await;
    let mut classes: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let mut down = Vec::new();
    for ((name, t), probe) in transports.iter().zip(probes) {
        t.close().await;
        let found = match probe {
            Ok(found) => found,
            Err(e) => {
                down.push(serde_json::json!({"host": name, "error": e.to_string()}));
                continue;
            }
        };
        for (host, nodes, fp) in found {
            let class = fp.host_class_under(key);
            let entry = classes.entry(class.clone()).or_insert_with(|| {
                serde_json::json!({
                    "host_class": class,
                    "class_label": fp.class_label_under(key),
                    "hosts": [],
                })
            });
            let mut row = serde_json::json!({
                "host": host,
                "fingerprint_hash": fp.hash(),
                "fingerprint": fp,
            });
            if !nodes.is_empty() {
                row["nodes"] = nodes.into();
            }
            if let Some(hosts) = entry["hosts"].as_array_mut() {
                hosts.push(row);
            }
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
