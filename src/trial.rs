//! Trial identity: a trial is one config on one cell at one fidelity and
//! repeat on one host class; its key is the sha256 of that, canonically
//! encoded, so any launcher anywhere computes the same key.

use serde_json::json;

use crate::canon::{canonical_json, sha256_hex};

/// The facts that identify a trial.
#[derive(Debug, Clone)]
pub struct TrialIdentity<'a> {
    pub study: &'a str,
    pub config: &'a serde_json::Value,
    pub cell: &'a serde_json::Value,
    pub fidelity: Option<f64>,
    pub repeat: u32,
    pub host_class: &'a str,
    /// What the measurement is for; sweep trials (the default) leave it
    /// out of the key, so their keys never change.
    pub role: Role,
}

/// Why a trial is measured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Role {
    /// A trial of the sweep.
    #[default]
    Sweep,
    /// A re-measurement of the baseline on one host, to detect drift; the
    /// tag makes each one unique.
    Anchor { host: String, tag: String },
    /// The final interleaved round of a bucket against the baseline.
    Confirm,
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Sweep => "sweep",
            Role::Anchor { .. } => "anchor",
            Role::Confirm => "confirm",
        }
    }
}

impl TrialIdentity<'_> {
    pub fn key(&self) -> String {
        let mut doc = json!({
            "study": self.study,
            "config": self.config,
            "cell": self.cell,
            "fidelity": self.fidelity,
            "repeat": self.repeat,
            "host_class": self.host_class,
        });
        match &self.role {
            Role::Sweep => {}
            Role::Anchor { host, tag } => {
                doc["role"] = json!("anchor");
                doc["host"] = json!(host);
                doc["tag"] = json!(tag);
            }
            Role::Confirm => doc["role"] = json!("confirm"),
        }
        sha256_hex(canonical_json(&doc).as_bytes())
    }
}

/// Whether a run counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Uncounted, to fill caches and compile.
    Warmup,
    /// Counted.
    Measure,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Measure => "measure",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_every_field_and_not_on_key_order() {
        let config = json!({"a": 1, "b": "x"});
        let config2: serde_json::Value = serde_json::from_str(r#"{"b":"x","a":1}"#).expect("json");
        let cell = json!({"n": 5});
        let id = |config: &serde_json::Value, repeat, class: &str| {
            TrialIdentity {
                study: "s",
                config: &config.clone(),
                cell: &cell,
                fidelity: None,
                repeat,
                host_class: class,
                role: Role::Sweep,
            }
            .key()
        };
        assert_eq!(id(&config, 0, "hc-1"), id(&config2, 0, "hc-1"));
        assert_ne!(id(&config, 0, "hc-1"), id(&config, 1, "hc-1"));
        assert_ne!(id(&config, 0, "hc-1"), id(&config, 0, "hc-2"));
        assert_eq!(id(&config, 0, "hc-1").len(), 64);
        let confirm = TrialIdentity {
            study: "s",
            config: &config,
            cell: &cell,
            fidelity: None,
            repeat: 0,
            host_class: "hc-1",
            role: Role::Confirm,
        }
        .key();
        assert_ne!(confirm, id(&config, 0, "hc-1"));
    }
}
