//! Canonical JSON and hashing: the same data always gives the same bytes,
//! whatever the map order or the serde_json features in the build.

use sha2::{Digest, Sha256};

/// Serialize with object keys sorted at every level and no whitespace.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // serde_json writes UTF-8; the fallback never runs.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Append the canonical JSON of `value` to `out`.
pub fn write_canonical(value: &serde_json::Value, out: &mut Vec<u8>) {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        serde_json::Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        // Writing a scalar to a Vec cannot fail.
        other => {
            let _ = serde_json::to_writer(&mut *out, other);
        }
    }
}

/// Append a JSON string (quoted and escaped as serde_json does).
pub fn write_str(text: &str, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Lower-case hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// Lower-case hex of `bytes`, as `hex::encode` writes it, but into a
/// buffer at once rather than one `char` at a time (which took a third
/// of keying a plan's trials).
pub fn to_hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    // Cannot fail: the buffer is exactly twice the input's length.
    let _ = hex::encode_to_slice(bytes, &mut out);
    // Hex digits are ASCII.
    String::from_utf8(out).unwrap_or_default()
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

    #[test]
    fn hex_is_written_as_the_hex_crate_writes_it() {
        for n in 0..70u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37).wrapping_add(n)).collect();
            assert_eq!(to_hex(&bytes), hex::encode(&bytes));
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(to_hex(&all), hex::encode(&all));
        assert_eq!(sha256_hex(b"abc").len(), 64);
    }
}
