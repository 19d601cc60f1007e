//! Trial identity: a trial is one config on one cell at one fidelity and
//! repeat on one host class; its key is the sha256 of that, canonically
//! encoded, so any launcher anywhere computes the same key.

use std::io::Write;

use crate::canon::{sha256_hex, write_canonical, write_str};

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
    /// A screening run of an adaptive search (a hyperband rung, a TPE
    /// suggestion), read on the proxy metric; the objective stage measures
    /// the finalists again as sweep trials.
    Rung,
}

impl Role {
    /// As `TUNECTL_ROLE` and attempt records write it.
    pub fn name(&self) -> &'static str {
        match self {
            Role::Sweep => "sweep",
            Role::Anchor { .. } => "anchor",
            Role::Confirm => "confirm",
            Role::Rung => "rung",
        }
    }

    /// What the attempt record of this trial says it is for.
    pub fn kind(&self) -> RoleKind {
        match self {
            Role::Sweep => RoleKind::Sweep,
            Role::Anchor { .. } => RoleKind::Anchor,
            Role::Confirm => RoleKind::Confirm,
            Role::Rung => RoleKind::Rung,
        }
    }
}

/// A [`Role`] as attempt records store it (`role`): its name alone, the
/// anchor's host and tag being the record's own fields or only in its key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum RoleKind {
    /// Records written before roles existed are sweep trials.
    #[default]
    Sweep,
    Anchor,
    Confirm,
    Rung,
    /// A role this tunectl does not know (written by a newer one, or by
    /// another tool), kept as written so that the record survives a copy
    /// or an index byte for byte. Such an attempt is no evidence: nothing
    /// is decided on it (see `decide`).
    Unknown(String),
}

impl RoleKind {
    pub fn as_str(&self) -> &str {
        match self {
            RoleKind::Sweep => "sweep",
            RoleKind::Anchor => "anchor",
            RoleKind::Confirm => "confirm",
            RoleKind::Rung => "rung",
            RoleKind::Unknown(name) => name,
        }
    }
}

impl From<&str> for RoleKind {
    fn from(name: &str) -> RoleKind {
        match name {
            "sweep" => RoleKind::Sweep,
            "anchor" => RoleKind::Anchor,
            "confirm" => RoleKind::Confirm,
            "rung" => RoleKind::Rung,
            other => RoleKind::Unknown(other.to_string()),
        }
    }
}

impl serde::Serialize for RoleKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for RoleKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RoleKind, D::Error> {
        Ok(RoleKind::from(String::deserialize(d)?.as_str()))
    }
}

impl TrialIdentity<'_> {
    /// sha256 of the canonical JSON of `{"cell", "config", "fidelity",
    /// "host_class", "repeat", "study"}`, plus `"role"` for confirmation
    /// and rung trials and `"role"`, `"host"`, `"tag"` for anchors (see
    /// docs/ledger.md). Written key by key in sorted order, without
    /// building the document.
    pub fn key(&self) -> String {
        let mut out: Vec<u8> = Vec::with_capacity(320);
        self.write_head(&mut out);
        self.write_tail(self.repeat, &mut out);
        sha256_hex(&out)
    }

    /// [`TrialIdentity::key`] of this trial with each of `repeats` as its
    /// repeat (the rest as it is), in order. The document up to the
    /// repeat is the same for all: it is hashed once, and the hasher's
    /// state cloned for each repeat, so that keying every repeat of a
    /// config costs little more than keying one.
    pub fn keys_over_repeats(&self, repeats: std::ops::Range<u32>) -> Vec<String> {
        use sha2::Digest;
        let mut head: Vec<u8> = Vec::with_capacity(320);
        self.write_head(&mut head);
        let mut hasher = sha2::Sha256::new();
        hasher.update(&head);
        let mut tail: Vec<u8> = Vec::with_capacity(64);
        repeats
            .map(|repeat| {
                tail.clear();
                self.write_tail(repeat, &mut tail);
                let mut h = hasher.clone();
                h.update(&tail);
                crate::canon::to_hex(&h.finalize())
            })
            .collect()
    }

    /// The canonical document up to the repeat: `{"cell", "config",
    /// "fidelity", ("host"), "host_class"`, in sorted order.
    fn write_head(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"cell\":");
        write_canonical(self.cell, out);
        out.extend_from_slice(b",\"config\":");
        write_canonical(self.config, out);
        out.extend_from_slice(b",\"fidelity\":");
        // As serde_json writes an Option<f64> (null when not finite).
        write_canonical(&serde_json::json!(self.fidelity), out);
        if let Role::Anchor { host, .. } = &self.role {
            out.extend_from_slice(b",\"host\":");
            write_str(host, out);
        }
        out.extend_from_slice(b",\"host_class\":");
        write_str(self.host_class, out);
    }

    /// The rest of the document from `"repeat"` on, with `repeat`.
    fn write_tail(&self, repeat: u32, out: &mut Vec<u8>) {
        // Writing to a Vec cannot fail.
        let _ = write!(out, ",\"repeat\":{repeat}");
        match &self.role {
            Role::Sweep => {}
            Role::Anchor { .. } => out.extend_from_slice(b",\"role\":\"anchor\""),
            Role::Confirm => out.extend_from_slice(b",\"role\":\"confirm\""),
            Role::Rung => out.extend_from_slice(b",\"role\":\"rung\""),
        }
        out.extend_from_slice(b",\"study\":");
        write_str(self.study, out);
        if let Role::Anchor { tag, .. } = &self.role {
            out.extend_from_slice(b",\"tag\":");
            write_str(tag, out);
        }
        out.push(b'}');
    }
}

/// Whether a run counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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
    use serde_json::json;

    use super::*;

    /// The key as first written: the document built, then canonicalised by
    /// the first canonical_json. The key written key by key must match it
    /// byte for byte: every key in every ledger depends on it.
    fn oracle(id: &TrialIdentity) -> String {
        fn canonical(value: &serde_json::Value, out: &mut String) {
            match value {
                serde_json::Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    out.push('{');
                    for (i, k) in keys.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&serde_json::Value::String((*k).clone()).to_string());
                        out.push(':');
                        if let Some(v) = map.get(*k) {
                            canonical(v, out);
                        }
                    }
                    out.push('}');
                }
                serde_json::Value::Array(items) => {
                    out.push('[');
                    for (i, v) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        canonical(v, out);
                    }
                    out.push(']');
                }
                other => out.push_str(&other.to_string()),
            }
        }
        let mut doc = json!({
            "study": id.study,
            "config": id.config,
            "cell": id.cell,
            "fidelity": id.fidelity,
            "repeat": id.repeat,
            "host_class": id.host_class,
        });
        match &id.role {
            Role::Sweep => {}
            Role::Anchor { host, tag } => {
                doc["role"] = json!("anchor");
                doc["host"] = json!(host);
                doc["tag"] = json!(tag);
            }
            Role::Confirm => doc["role"] = json!("confirm"),
            Role::Rung => doc["role"] = json!("rung"),
        }
        let mut text = String::new();
        canonical(&doc, &mut text);
        assert_eq!(crate::canon::canonical_json(&doc), text);
        sha256_hex(text.as_bytes())
    }

    #[test]
    fn keys_match_the_first_implementation_byte_for_byte() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let words = [
            "a",
            "threads",
            "Block",
            "é",
            "ключ",
            "\"q\"",
            "back\\slash",
            "tab\t",
            "nul\u{0}",
            "emoji 😀",
            "",
            "z",
        ];
        let scalar = |n: u64| -> serde_json::Value {
            match n % 7 {
                0 => json!(n as i64 - 1_000_000),
                1 => json!((n as f64) / 7.0),
                2 => json!(n.is_multiple_of(2)),
                3 => serde_json::Value::Null,
                4 => json!(words[(n % words.len() as u64) as usize]),
                5 => json!(1e300 * (n as f64)),
                _ => json!(u64::MAX - n),
            }
        };
        for _ in 0..2000 {
            let mut config = serde_json::Map::new();
            for _ in 0..(next() % 7) {
                let k = words[(next() % words.len() as u64) as usize].to_string()
                    + &(next() % 3).to_string();
                let v = match next() % 5 {
                    0 => json!([scalar(next()), scalar(next())]),
                    1 => json!({"inner": scalar(next()), "a": [scalar(next())]}),
                    _ => scalar(next()),
                };
                config.insert(k, v);
            }
            let config = serde_json::Value::Object(config);
            let cell = match next() % 3 {
                0 => json!({}),
                1 => json!({"batch": next() % 64, "seq": scalar(next())}),
                _ => json!({"n": scalar(next())}),
            };
            let role = match next() % 4 {
                0 => Role::Sweep,
                1 => Role::Confirm,
                3 => Role::Rung,
                _ => Role::Anchor {
                    host: words[(next() % words.len() as u64) as usize].to_string(),
                    tag: format!("{}", next()),
                },
            };
            let fidelity = match next() % 4 {
                0 => Some(next() as f64 / 3.0),
                1 => Some(f64::NAN),
                _ => None,
            };
            let id = TrialIdentity {
                study: words[(next() % words.len() as u64) as usize],
                config: &config,
                cell: &cell,
                fidelity,
                repeat: (next() % 1000) as u32,
                host_class: "hc-0123456789ab",
                role,
            };
            assert_eq!(id.key(), oracle(&id), "{id:?}");
            // Keyed over a range of repeats, each as keyed alone.
            let from = id.repeat;
            let to = from + (next() % 4) as u32;
            let many = id.keys_over_repeats(from..to);
            assert_eq!(many.len(), (to - from) as usize);
            for (repeat, key) in (from..to).zip(&many) {
                let one = TrialIdentity {
                    repeat,
                    role: id.role.clone(),
                    ..id
                };
                assert_eq!(key, &oracle(&one), "{one:?}");
            }
        }
    }

    /// Every role reads back as written; one this tunectl does not know
    /// too, as an unknown role.
    #[test]
    fn role_kinds_read_and_write_as_their_names() {
        for role in [
            Role::Sweep,
            Role::Confirm,
            Role::Rung,
            Role::Anchor {
                host: "h".into(),
                tag: "t".into(),
            },
        ] {
            let kind = role.kind();
            let text = serde_json::to_string(&kind).expect("json");
            assert_eq!(text, format!("\"{}\"", kind.as_str()));
            let back: RoleKind = serde_json::from_str(&text).expect("reads");
            assert_eq!(back, kind);
        }
        let odd: RoleKind = serde_json::from_str("\"probe\"").expect("an unknown role");
        assert_eq!(odd, RoleKind::Unknown("probe".into()));
        assert_eq!(serde_json::to_string(&odd).expect("json"), "\"probe\"");
        assert!(serde_json::from_str::<RoleKind>("3").is_err());
    }

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
