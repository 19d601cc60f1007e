//! Canonical JSON and hashing: the same data always gives the same bytes,
//! whatever the map order or the serde_json features in the build.

use sha2::{Digest, Sha256};

/// Serialize with object keys sorted at every level and no whitespace.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
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
                    write_canonical(v, out);
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
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Lower-case hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_matter() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":{"d":[1,2],"c":"x"}}"#).expect("json");
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"c":"x","d":[1,2]},"b":1}"#).expect("json");
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":{"c":"x","d":[1,2]},"b":1}"#);
    }
}
