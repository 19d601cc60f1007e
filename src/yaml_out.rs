//! A small YAML emitter: block style, keys in the order they were given,
//! and every string that YAML (1.1 or 1.2) could read as something else
//! double-quoted. What it writes reads back, through the crate's own loader
//! ([`crate::spec::yaml`]), as the same value.
//!
//! [`Yaml`] is an ordered tree (a map keeps its insertion order, unlike
//! `serde_json::Map`); [`to_yaml`] is a shortcut for JSON values (whose
//! object keys come out sorted).

use std::fmt::Write as _;

/// An ordered YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Yaml {
    Null,
    Bool(bool),
    /// A number as JSON writes it (`3`, `0.25`, `1e-7`).
    Number(serde_json::Number),
    Str(String),
    List(Vec<Yaml>),
    /// Key/value pairs in emission order.
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    /// An empty map, to fill with [`Yaml::with`] or [`Yaml::insert`].
    pub fn map() -> Yaml {
        Yaml::Map(Vec::new())
    }

    /// This map with `key: value` appended (a no-op on a non-map).
    pub fn with(mut self, key: &str, value: impl Into<Yaml>) -> Yaml {
        self.insert(key, value);
        self
    }

    /// Append `key: value` to a map (a no-op on a non-map).
    pub fn insert(&mut self, key: &str, value: impl Into<Yaml>) {
        if let Yaml::Map(entries) = self {
            entries.push((key.to_string(), value.into()));
        }
    }

    /// A float, or null when it is not finite (YAML's `.inf`/`.nan` are
    /// not JSON and would not survive a round trip).
    pub fn float(x: f64) -> Yaml {
        serde_json::Number::from_f64(x)
            .map(Yaml::Number)
            .unwrap_or(Yaml::Null)
    }

    /// The YAML text of this value, at the top level.
    pub fn render(&self) -> String {
        let mut out = String::new();
        emit(self, 0, &mut out);
        out
    }
}

impl From<&serde_json::Value> for Yaml {
    fn from(v: &serde_json::Value) -> Yaml {
        use serde_json::Value as J;
        match v {
            J::Null => Yaml::Null,
            J::Bool(b) => Yaml::Bool(*b),
            J::Number(n) => Yaml::Number(n.clone()),
            J::String(s) => Yaml::Str(s.clone()),
            J::Array(items) => Yaml::List(items.iter().map(Yaml::from).collect()),
            J::Object(m) => Yaml::Map(m.iter().map(|(k, v)| (k.clone(), Yaml::from(v))).collect()),
        }
    }
}

impl From<serde_json::Value> for Yaml {
    fn from(v: serde_json::Value) -> Yaml {
        Yaml::from(&v)
    }
}

impl From<&str> for Yaml {
    fn from(s: &str) -> Yaml {
        Yaml::Str(s.to_string())
    }
}

impl From<String> for Yaml {
    fn from(s: String) -> Yaml {
        Yaml::Str(s)
    }
}

impl From<&String> for Yaml {
    fn from(s: &String) -> Yaml {
        Yaml::Str(s.clone())
    }
}

impl From<bool> for Yaml {
    fn from(b: bool) -> Yaml {
        Yaml::Bool(b)
    }
}

impl From<i64> for Yaml {
    fn from(i: i64) -> Yaml {
        Yaml::Number(i.into())
    }
}

impl From<u32> for Yaml {
    fn from(i: u32) -> Yaml {
        Yaml::Number(i.into())
    }
}

impl From<u64> for Yaml {
    fn from(i: u64) -> Yaml {
        Yaml::Number(i.into())
    }
}

impl From<usize> for Yaml {
    fn from(i: usize) -> Yaml {
        Yaml::Number((i as u64).into())
    }
}

impl From<f64> for Yaml {
    fn from(x: f64) -> Yaml {
        Yaml::float(x)
    }
}

impl<T: Into<Yaml>> From<Option<T>> for Yaml {
    fn from(v: Option<T>) -> Yaml {
        v.map(Into::into).unwrap_or(Yaml::Null)
    }
}

impl<T: Into<Yaml>> From<Vec<T>> for Yaml {
    fn from(v: Vec<T>) -> Yaml {
        Yaml::List(v.into_iter().map(Into::into).collect())
    }
}

/// YAML for a JSON value (object keys in the map's order: sorted).
pub fn to_yaml(v: &serde_json::Value) -> String {
    Yaml::from(v).render()
}

/// `header` as `# ` comment lines, then the document. A character of
/// [`needs_escape`] in the header is written as its escape (`\e`,
/// `\u202E`), as in a value: a comment holds no raw control character
/// either (a lone carriage return would end it, and start a line of YAML).
pub fn document(header: &str, body: &Yaml) -> String {
    let mut out = String::new();
    for line in header.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            let mut text = String::new();
            escape_into(line, false, &mut text);
            let _ = writeln!(out, "# {text}");
        }
    }
    out.push_str(&body.render());
    out
}

/// Whether `c` is never written raw: a control character (C0 but for
/// none, DEL, C1), a line or paragraph separator, a character that changes
/// the direction or the visibility of the text around it (bidi embeddings,
/// overrides and isolates, marks, zero-width and other format characters,
/// the byte-order mark), or a noncharacter YAML does not allow. Written as
/// an escape, such a character reads back as itself and cannot reorder,
/// hide or restyle what a terminal or an editor shows of the file.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            u32::from(c),
            0x00AD
                | 0x0600..=0x0605
                | 0x061C
                | 0x06DD
                | 0x070F
                | 0x0890..=0x0891
                | 0x08E2
                | 0x180E
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0xFFFE..=0xFFFF
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0001
                | 0xE0020..=0xE007F
        )
}

/// Append `s` to `out` with every character of [`needs_escape`] as a YAML
/// double-quoted escape (`\0 \a \b \t \n \v \f \r \e \N \L \P`, else
/// `\xHH`, `\uHHHH` or `\UHHHHHHHH`), and, when `quoted`, `"` and `\` too.
fn escape_into(s: &str, quoted: bool, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' | '\\' if quoted => {
                out.push('\\');
                out.push(c);
            }
            c if !needs_escape(c) => out.push(c),
            '\0' => out.push_str("\\0"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\x0b' => out.push_str("\\v"),
            '\x0c' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c => {
                let n = u32::from(c);
                let _ = if n <= 0xFF {
                    write!(out, "\\x{n:02X}")
                } else if n <= 0xFFFF {
                    write!(out, "\\u{n:04X}")
                } else {
                    write!(out, "\\U{n:08X}")
                };
            }
        }
    }
}

/// Words that some YAML reader takes for a boolean or null (YAML 1.1 and
/// 1.2, any case).
const KEYWORDS: &[&str] = &[
    "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~",
];

/// Characters that may start a plain scalar without any special meaning.
fn plain_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '/' || c == '(' || c == '$'
}

/// Characters that may appear inside a plain scalar here. Deliberately
/// narrow: `:` and `#` (mappings, comments), quotes, brackets, braces and
/// control characters force quotes.
fn plain_char(c: char) -> bool {
    c.is_alphanumeric() || " ._-/()+@×,=<>^~$%".contains(c)
}

/// Whether `s` can be written without quotes and still read back as the
/// same string.
pub fn is_plain(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    // A leading digit is fine where no reader could take the whole for a
    // number, date or time: numbers never contain a space, and dates with
    // a time contain `:` (never plain here).
    (plain_start(first) || (first.is_ascii_digit() && s.contains(' ')))
        && s.chars().all(|c| plain_char(c) && !needs_escape(c))
        && !s.ends_with(' ')
        && !s.contains("  ")
        && !KEYWORDS.contains(&s.to_ascii_lowercase().as_str())
        // `.inf`, `.nan` start with a dot (not plain already); words such as
        // `inf`/`nan`/`infinity` are strings to YAML but numbers to some
        // readers: quote them too.
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "inf" | "nan" | "infinity" | "+inf" | "-inf"
        )
}

/// A scalar's text: plain where safe, else a double-quoted string with
/// YAML's escapes ([`quote`]).
fn scalar(v: &Yaml) -> String {
    match v {
        Yaml::Null => "null".to_string(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Str(s) => quote(s),
        Yaml::List(items) if items.is_empty() => "[]".to_string(),
        Yaml::Map(entries) if entries.is_empty() => "{}".to_string(),
        // Not reached: non-empty collections are emitted in block style.
        Yaml::List(_) | Yaml::Map(_) => String::new(),
    }
}

/// A string as it must be written (also used for keys): plain, or
/// double-quoted with YAML's escapes, so that the text written holds no
/// character of [`needs_escape`] raw and reads back as `s`.
pub fn quote(s: &str) -> String {
    if is_plain(s) {
        s.to_string()
    } else {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        escape_into(s, true, &mut out);
        out.push('"');
        out
    }
}

fn is_block(v: &Yaml) -> bool {
    match v {
        Yaml::List(items) => !items.is_empty(),
        Yaml::Map(entries) => !entries.is_empty(),
        _ => false,
    }
}

/// Emit `v` in block context at `indent` (two spaces per level).
fn emit(v: &Yaml, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    match v {
        Yaml::Map(entries) if !entries.is_empty() => {
            for (k, val) in entries {
                if is_block(val) {
                    let _ = writeln!(out, "{pad}{}:", quote(k));
                    emit(val, indent + 1, out);
                } else {
                    let _ = writeln!(out, "{pad}{}: {}", quote(k), scalar(val));
                }
            }
        }
        Yaml::List(items) if !items.is_empty() => {
            for item in items {
                if is_block(item) {
                    // The item's first line goes after the dash; the rest
                    // stay indented one level deeper than the dash.
                    let mut body = String::new();
                    emit(item, indent + 1, &mut body);
                    let inner = "  ".repeat(indent + 1);
                    let rest = body.strip_prefix(inner.as_str()).unwrap_or(&body);
                    let _ = write!(out, "{pad}- {rest}");
                } else {
                    let _ = writeln!(out, "{pad}- {}", scalar(item));
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", scalar(other));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    /// Read YAML back with the crate's own loader, as JSON.
    fn load(text: &str) -> serde_json::Value {
        let node = crate::spec::yaml::parse_text(Path::new("t.yaml"), text)
            .unwrap_or_else(|e| panic!("does not parse: {e}\n{text}"));
        crate::tuned::node_to_json(&node)
    }

    fn round_trip(v: serde_json::Value) {
        let text = to_yaml(&v);
        assert_eq!(load(&text), v, "YAML was:\n{text}");
    }

    #[test]
    fn nested_maps_and_lists() {
        let v = Yaml::map()
            .with("name", "fake")
            .with(
                "gpus",
                Yaml::List(vec![
                    Yaml::map().with("name", "H100").with("memory", 81559u64),
                    Yaml::map().with("name", "A100").with("memory", Yaml::Null),
                ]),
            )
            .with(
                "grid",
                Yaml::List(vec![
                    Yaml::List(vec![1i64.into(), 2i64.into()]),
                    Yaml::List(vec![]),
                ]),
            )
            .with("nested", Yaml::map().with("a", Yaml::map().with("b", true)))
            .with("empty_map", Yaml::map())
            .with("empty_list", Yaml::List(vec![]));
        let text = v.render();
        assert_eq!(
            text,
            "name: fake
gpus:
  - name: H100
    memory: 81559
  - name: A100
    memory: null
grid:
  - - 1
    - 2
  - []
nested:
  a:
    b: true
empty_map: {}
empty_list: []
"
        );
        assert_eq!(
            load(&text),
            json!({
                "name": "fake",
                "gpus": [{"name": "H100", "memory": 81559}, {"name": "A100", "memory": null}],
                "grid": [[1, 2], []],
                "nested": {"a": {"b": true}},
                "empty_map": {},
                "empty_list": [],
            })
        );
    }

    #[test]
    fn key_order_is_emission_order() {
        let text = Yaml::map().with("z", 1i64).with("a", 2i64).render();
        assert_eq!(text, "z: 1\na: 2\n");
    }

    #[test]
    fn strings_yaml_would_misread_are_quoted() {
        for s in [
            "",
            " ",
            "true",
            "False",
            "yes",
            "No",
            "on",
            "OFF",
            "y",
            "n",
            "null",
            "Null",
            "~",
            "550",
            "12.4",
            "550.54.15",
            "1e3",
            "0x1F",
            "0o17",
            "1_000",
            "+1",
            "-1",
            ".5",
            ".inf",
            "-.inf",
            ".nan",
            "inf",
            "NaN",
            "Infinity",
            "-",
            "- x",
            "? x",
            ": x",
            "a: b",
            "a #b",
            "#x",
            "&anchor",
            "*alias",
            "!tag",
            "|",
            ">",
            "%x",
            "@x",
            "`x",
            "'x'",
            "\"x\"",
            "[1]",
            "{a}",
            "a,b",
            "lead ",
            " lead",
            "two  spaces",
            "line\nbreak",
            "tab\there",
            "ctl\u{1}",
            "back\\slash",
            "2x-nvidia-h100",
            "0",
            "1 2",
            "2024-01-01",
            "2024-01-01 10:00:00",
            "12:30",
            "1:20:30",
            "0755",
            "1.0 ",
            "3 ",
        ] {
            round_trip(json!({ "v": s }));
            round_trip(json!({ "list": [s] }));
            round_trip(json!({ s: 1 }));
        }
    }

    #[test]
    fn readable_strings_stay_plain() {
        for s in [
            "fake",
            "mode=fast",
            "NVIDIA H100 80GB HBM3",
            "2× NVIDIA H100 80GB HBM3 (81559 MiB), driver 550",
            "hc-68fa00c4deaa",
            "ops/s",
            "exit code 3 (repeat 0, host local)",
        ] {
            assert_eq!(quote(s), s, "{s} should stay plain");
            round_trip(json!({ "v": s }));
        }
        // Brackets could open a flow collection: quoted, and read back.
        assert!(quote("n ∈ [1, 2)").starts_with('"'));
        round_trip(json!({ "v": "n ∈ [1, 2)" }));
    }

    #[test]
    fn numbers_and_scalars() {
        round_trip(json!({
            "i": 3, "neg": -7, "f": 0.25, "one": 1.0, "tiny": 1e-7, "big": 1.5e300,
            "b": false, "nul": null,
        }));
        assert_eq!(Yaml::float(f64::NAN), Yaml::Null);
        assert_eq!(Yaml::from(Some(2.5)).render(), "2.5\n");
        assert_eq!(Yaml::from(None::<f64>).render(), "null\n");
    }

    /// Control, bidi and other invisible characters are never written raw,
    /// in a value, a key or the header: each is a YAML escape that reads
    /// back as itself.
    #[test]
    fn control_and_bidi_characters_are_escaped_and_read_back() {
        let nasty = "a\u{1b}[31mred\u{7}\u{0}\u{7f}\u{85}\u{9b}\u{202e}gnp.exe\u{2066}\u{200b}\u{2028}\u{feff}\u{e0041}\r\"\\z";
        let text = document(
            &format!("header {nasty}\rkey: injected"),
            &Yaml::map()
                .with("v", nasty)
                .with(nasty, 1i64)
                .with("list", vec![nasty]),
        );
        let raw: Vec<char> = text
            .chars()
            .filter(|c| *c != '\n' && needs_escape(*c))
            .collect();
        assert!(raw.is_empty(), "raw {raw:?} in:\n{text}");
        assert!(
            text.contains(
                r#""a\e[31mred\a\0\x7F\N\x9B\u202Egnp.exe\u2066\u200B\L\uFEFF\U000E0041\r\"\\z""#
            ),
            "{text}"
        );
        assert!(text.starts_with("# header a\\e[31m"), "{text}");
        assert_eq!(
            load(&text),
            json!({"v": nasty, nasty: 1, "list": [nasty]}),
            "{text}"
        );
        assert_eq!(quote("plain"), "plain");
        assert!(!is_plain("x\u{202e}y"));
    }

    #[test]
    fn document_with_header() {
        let text = document("what this is\n\nsecond", &Yaml::map().with("a", 1i64));
        assert_eq!(text, "# what this is\n#\n# second\na: 1\n");
        assert_eq!(load(&text), json!({"a": 1}));
    }
}
