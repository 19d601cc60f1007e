//! A strict walker over a YAML document that keeps line and column.
//!
//! `marked_yaml` parses into nodes that remember where they came from; this
//! module turns those nodes into typed values while recording every problem
//! (unknown key, wrong type, bad value) as a [`Diagnostic`] naming the file,
//! the position and the key path. Nothing here stops at the first error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode, Span};
use marked_yaml::{LoaderOptions, Node};

use super::diag::{Diagnostic, Diagnostics};
use super::value::Value;

/// Deepest nesting of lists and mappings accepted in an input file (a
/// study nests about 5 deep; the walkers and the node tree recurse).
pub const MAX_DEPTH: usize = 64;

/// Longest duration accepted anywhere (30 days).
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Parse YAML text (named `file` in diagnostics). A UTF-8 byte-order mark
/// at its start, as some editors write, is not part of the text (columns
/// count from after it, as the editor shows them).
pub fn parse_text(file: &Path, text: &str) -> Result<Node, Diagnostics> {
    parse_checked(file, text, true).map_err(|(d, _)| d)
}

/// [`parse_text`], duplicate keys an error or not; on an error, whether it
/// is a duplicate key (whose message quotes the key).
fn parse_checked(file: &Path, text: &str, duplicates: bool) -> Result<Node, (Diagnostics, bool)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err((
            Diagnostics::whole_file(file, "the file is empty; expected a YAML mapping"),
            false,
        ));
    }
    check_characters(file, text).map_err(|d| (d, false))?;
    check_depth(file, text).map_err(|d| (d, false))?;
    let options = LoaderOptions::default()
        .error_on_duplicate_keys(duplicates)
        .prevent_coercion(true);
    marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| {
        let duplicate = matches!(e, marked_yaml::LoadError::DuplicateKey(_));
        (load_error(file, e), duplicate)
    })
}

/// A kind of input file, by the top-level keys such a file has.
#[derive(Debug, Clone, Copy)]
pub struct FileKind {
    /// What it is, for messages: `study`, `inventory`, `tuned`.
    pub what: &'static str,
    /// Its top-level keys.
    pub keys: &'static [&'static str],
}

/// Parse the text of a file of `kind`: [`parse_text`], then the file must
/// look like one of its kind, a mapping with at least one key such a file
/// has.
///
/// Messages about a file quote its text (a key in a key path or an
/// unknown-key message, a value) only when it looks like one of its kind.
/// A file that does not (a `.env`, a key file, a shadow file reached
/// through a symlink: anything named where a study, inventory or tuned
/// file was meant) is refused with its position only, and nothing of it
/// is shown: syntax errors name a place and what the parser expected, a
/// file whose top level is not a mapping is said to be one, and a mapping
/// none of whose keys is one of the kind's gets this one message. A
/// duplicate key is named only in a file that looks like one of its kind.
pub fn parse_kind(file: &Path, text: &str, kind: FileKind) -> Result<Node, Diagnostics> {
    let node = match parse_checked(file, text, true) {
        Ok(node) => node,
        Err((d, false)) => return Err(d),
        // Named only if the file, read with the duplicate kept, is one.
        Err((d, true)) => {
            return match parse_checked(file, text, false) {
                Ok(node) if looks_like(&node, kind) => Err(d),
                Ok(node) => Err(not_of_kind(file, &node, kind)),
                Err(_) => Err(d),
            };
        }
    };
    if looks_like(&node, kind) || !matches!(node, Node::Mapping(_)) {
        // Not a mapping: the walker says so, quoting nothing.
        return Ok(node);
    }
    Err(not_of_kind(file, &node, kind))
}

/// Whether `text` parses to a mapping with `key` among its top-level keys,
/// in any YAML style (block, flow, quoted keys, after `---`); `None` when
/// it does not parse (the loader then says why).
pub fn has_top_level_key(file: &Path, text: &str, key: &str) -> Option<bool> {
    let node = parse_checked(file, text, false).ok()?;
    Some(
        node.as_mapping()
            .is_some_and(|m| m.keys().any(|k| k.as_str() == key)),
    )
}

/// Whether `node` is a mapping with at least one top-level key of `kind`.
fn looks_like(node: &Node, kind: FileKind) -> bool {
    node.as_mapping()
        .is_some_and(|m| m.keys().any(|k| kind.keys.contains(&k.as_str())))
}

/// The refusal of a mapping none of whose keys is of `kind`: at its first
/// key, quoting nothing of the file.
fn not_of_kind(file: &Path, node: &Node, kind: FileKind) -> Diagnostics {
    let (line, column) = node
        .as_mapping()
        .and_then(|m| m.keys().next())
        .and_then(|k| k.span().start())
        .or_else(|| node.span().start())
        .map(|m| (m.line(), m.column()))
        .unwrap_or((0, 0));
    let what = kind.what;
    let a = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    at(
        file,
        line,
        column,
        format!(
            "not {a} {what} file: none of its top-level keys is one {a} {what} file has ({}); its content is not shown",
            kind.keys.join(", ")
        ),
    )
}

/// A diagnostic at one position of a file.
fn at(file: &Path, line: usize, column: usize, message: String) -> Diagnostics {
    Diagnostics(vec![Diagnostic {
        file: file.to_path_buf(),
        line,
        column,
        field: String::new(),
        message,
    }])
}

/// Refuse characters YAML does not allow in a stream (C0 controls but tab,
/// newline and carriage return; DEL; C1 controls but NEL; U+FFFE/U+FFFF):
/// a NUL byte, in particular, would silently end the document there.
fn check_characters(file: &Path, text: &str) -> Result<(), Diagnostics> {
    for (n, line) in text.split('\n').enumerate() {
        for (col, c) in line.chars().enumerate() {
            let allowed = matches!(c, '\t' | '\r' | '\u{85}')
                || !(c.is_control() || c == '\u{fffe}' || c == '\u{ffff}');
            if !allowed {
                let what = if c == '\0' {
                    "a NUL byte".to_string()
                } else {
                    format!("the control character U+{:04X}", u32::from(c))
                };
                return Err(at(
                    file,
                    n + 1,
                    col + 1,
                    format!(
                        "the file contains {what}, which YAML does not allow (write a control character as an escape in a double-quoted string, e.g. \"\\e\")"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuse lists and mappings nested deeper than [`MAX_DEPTH`], before the
/// tree is built (a tree thousands deep overflows the stack of whatever
/// walks or drops it). Reads the parser's events, which keep no tree; a
/// syntax error is left for the loader to report.
fn check_depth(file: &Path, text: &str) -> Result<(), Diagnostics> {
    use yaml_rust2::Event;
    let mut parser = yaml_rust2::parser::Parser::new_from_str(text);
    let mut depth = 0usize;
    loop {
        let Ok((event, mark)) = parser.next_token() else {
            return Ok(());
        };
        match event {
            Event::StreamEnd => return Ok(()),
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(at(
                        file,
                        mark.line(),
                        mark.col() + 1,
                        format!("lists and mappings are nested more than {MAX_DEPTH} deep"),
                    ));
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
}

fn load_error(file: &Path, err: marked_yaml::LoadError) -> Diagnostics {
    use marked_yaml::LoadError as E;
    let (marker, message) = match &err {
        E::TopLevelMustBeMapping(m) => (
            Some(*m),
            "the top level must be a mapping (key: value)".to_string(),
        ),
        E::TopLevelMustBeSequence(m) => (Some(*m), "the top level must be a sequence".to_string()),
        E::UnexpectedAnchor(m) => (
            Some(*m),
            "YAML anchors and aliases are not supported".to_string(),
        ),
        E::MappingKeyMustBeScalar(m) => {
            (Some(*m), "mapping keys must be plain scalars".to_string())
        }
        E::UnexpectedTag(m) => (Some(*m), "YAML tags are not supported".to_string()),
        E::ScanError(m, e) => (Some(*m), format!("invalid YAML: {e}")),
        E::DuplicateKey(inner) => {
            let key = &inner.key;
            (
                key.span().start().copied(),
                format!(
                    "duplicate key `{}` (first defined on line {})",
                    key.as_str(),
                    inner.prev_key.span().start().map(|m| m.line()).unwrap_or(0)
                ),
            )
        }
    };
    let (line, column) = marker
        .map(|m: marked_yaml::types::Marker| (m.line(), m.column()))
        .unwrap_or((0, 0));
    Diagnostics(vec![Diagnostic {
        file: file.to_path_buf(),
        line,
        column,
        field: String::new(),
        message,
    }])
}

/// Join a key onto a key path.
pub fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Index into a key path.
pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// What a node is, for "expected X, found Y" messages.
pub fn describe(node: &Node) -> String {
    match node {
        Node::Mapping(_) => "a mapping".to_string(),
        Node::Sequence(_) => "a list".to_string(),
        Node::Scalar(s) => match scalar_value(s) {
            Value::Null => "nothing (null)".to_string(),
            Value::Bool(b) => format!("the boolean {b}"),
            Value::Int(i) => format!("the integer {i}"),
            Value::Float(f) => format!("the number {f}"),
            Value::Str(s) => format!("the string {s:?}"),
        },
    }
}

/// The typed value of a scalar: plain scalars follow the YAML 1.2 core
/// schema (booleans, null, integers, floats); quoted scalars are strings.
pub fn scalar_value(s: &MarkedScalarNode) -> Value {
    let text = s.as_str();
    if !s.may_coerce() {
        return Value::Str(text.to_string());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" => return Value::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    if let Some(v) = parse_int(text) {
        return Value::Int(v);
    }
    let looks_numeric = text
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-' | '_'))
        && text.chars().any(|c| c.is_ascii_digit());
    if looks_numeric && let Ok(f) = text.replace('_', "").parse::<f64>() {
        return Value::Float(f);
    }
    Value::Str(text.to_string())
}

fn parse_int(text: &str) -> Option<i64> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let body = body.replace('_', "");
    let parsed = if let Some(hex) = body.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = body.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()
    } else if !body.is_empty() && body.chars().all(|c| c.is_ascii_digit()) {
        body.parse::<i64>().ok()
    } else {
        None
    }?;
    Some(if neg { -parsed } else { parsed })
}

/// Parse a duration such as `30s`, `5m`, `1h30m`, `250ms` or a plain number
/// of seconds, at most [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let too_long = || {
        format!(
            "`{t}` is longer than the maximum of {} days",
            MAX_DURATION.as_secs() / 86400
        )
    };
    if let Ok(secs) = t.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(format!("`{t}` is not a valid duration"));
        }
        if secs > MAX_DURATION.as_secs_f64() {
            return Err(too_long());
        }
        return Duration::try_from_secs_f64(secs).map_err(|_| too_long());
    }
    let d = humantime::parse_duration(t)
        .map_err(|e| format!("`{t}` is not a valid duration ({e}); use e.g. 30s, 5m, 1h30m"))?;
    if d > MAX_DURATION {
        return Err(too_long());
    }
    Ok(d)
}

/// Walks nodes of one file and collects diagnostics.
pub struct Walker {
    file: PathBuf,
    /// The file's text, when known: places inside a scalar are found in it.
    text: Option<String>,
    pub diags: Diagnostics,
    /// What is valid but likely a mistake (`validate` and `plan` say it).
    pub warnings: Vec<Diagnostic>,
}

impl Walker {
    pub fn new(file: &Path) -> Self {
        Walker {
            file: file.to_path_buf(),
            text: None,
            diags: Diagnostics::default(),
            warnings: Vec::new(),
        }
    }

    /// A walker that knows the file's text (see [`Walker::error_inside`]).
    pub fn with_text(file: &Path, text: &str) -> Self {
        Walker {
            text: Some(text.to_string()),
            ..Walker::new(file)
        }
    }

    /// Record a problem at the `nth` (0-based) occurrence of `needle` in
    /// the file's text from `node`'s start (a place inside a scalar, such
    /// as a template's `{{`); at the node itself when it cannot be found.
    pub fn error_inside(
        &mut self,
        node: &Node,
        needle: &str,
        nth: usize,
        field: &str,
        message: impl Into<String>,
    ) {
        let found = node.span().start().and_then(|m| {
            let text = self.text.as_deref()?;
            let start = text
                .char_indices()
                .nth(m.character())
                .map(|(b, _)| b)
                .unwrap_or(text.len());
            let (at, _) = text[start..].match_indices(needle).nth(nth)?;
            let at = start + at;
            let line = text[..at].matches('\n').count() + 1;
            let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
            Some((line, text[line_start..at].chars().count() + 1))
        });
        match found {
            Some((line, column)) => self.diags.push(Diagnostic {
                file: self.file.clone(),
                line,
                column,
                field: field.to_string(),
                message: message.into(),
            }),
            None => self.error_at(node, field, message),
        }
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// A diagnostic of this file at `span`.
    fn at(&self, span: &Span, field: &str, message: String) -> Diagnostic {
        let (line, column) = span
            .start()
            .map(|m| (m.line(), m.column()))
            .unwrap_or((0, 0));
        Diagnostic {
            file: self.file.clone(),
            line,
            column,
            field: field.to_string(),
            message,
        }
    }

    /// Record a problem at a span.
    pub fn error(&mut self, span: &Span, field: &str, message: impl Into<String>) {
        let d = self.at(span, field, message.into());
        self.diags.push(d);
    }

    /// Record a problem at a node.
    pub fn error_at(&mut self, node: &Node, field: &str, message: impl Into<String>) {
        self.error(node.span(), field, message);
    }

    /// A warning at `span`: valid, but likely a mistake.
    pub fn warn(&mut self, span: &Span, field: &str, message: impl Into<String>) {
        let d = self.at(span, field, message.into());
        self.warnings.push(d);
    }

    pub fn mapping<'a>(&mut self, node: &'a Node, field: &str) -> Option<&'a MarkedMappingNode> {
        match node {
            Node::Mapping(m) => Some(m),
            other => {
                let found = describe(other);
                self.error_at(other, field, format!("expected a mapping, found {found}"));
                None
            }
        }
    }

    pub fn sequence<'a>(&mut self, node: &'a Node, field: &str) -> Option<&'a MarkedSequenceNode> {
        match node {
            Node::Sequence(s) => Some(s),
            other => {
                let found = describe(other);
                self.error_at(other, field, format!("expected a list, found {found}"));
                None
            }
        }
    }

    /// Report every key of `map` that is not in `allowed`, with a suggestion.
    pub fn check_keys(&mut self, map: &MarkedMappingNode, field: &str, allowed: &[&str]) {
        for key in map.keys() {
            let name = key.as_str();
            if allowed.contains(&name) {
                continue;
            }
            let mut message = format!("unknown key `{name}`");
            let best = allowed
                .iter()
                .map(|a| (strsim::jaro_winkler(name, a), *a))
                .filter(|(score, _)| *score > 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((_, suggestion)) => {
                    message.push_str(&format!(" (did you mean `{suggestion}`?)"))
                }
                None => message.push_str(&format!(" (expected one of: {})", allowed.join(", "))),
            }
            self.error(key.span(), &join(field, name), message);
        }
    }

    /// A key that must be present.
    pub fn required<'a>(
        &mut self,
        map: &'a MarkedMappingNode,
        field: &str,
        key: &str,
    ) -> Option<&'a Node> {
        let node = map.get_node(key);
        if node.is_none() {
            // A block mapping's own span starts at its first key's colon;
            // the first key itself is where a reader looks.
            let span = map.keys().next().map(|k| k.span()).unwrap_or(map.span());
            self.error(span, &join(field, key), "missing required key");
        }
        node
    }

    pub fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match node {
            Node::Scalar(s) => match scalar_value(s) {
                Value::Str(v) => Some(v),
                Value::Null => {
                    self.error_at(node, field, "expected a string, found nothing (null)");
                    None
                }
                // Numbers and booleans written where text is expected are
                // kept as written (e.g. `dtype: 16`).
                _ => Some(s.as_str().to_string()),
            },
            other => {
                let found = describe(other);
                self.error_at(other, field, format!("expected a string, found {found}"));
                None
            }
        }
    }

    pub fn int(&mut self, node: &Node, field: &str) -> Option<i64> {
        match node {
            Node::Scalar(s) => match scalar_value(s) {
                Value::Int(i) => Some(i),
                _ => {
                    let found = describe(node);
                    self.error_at(node, field, format!("expected an integer, found {found}"));
                    None
                }
            },
            other => {
                let found = describe(other);
                self.error_at(other, field, format!("expected an integer, found {found}"));
                None
            }
        }
    }

    /// An integer that must be at least `min`.
    pub fn int_at_least(&mut self, node: &Node, field: &str, min: i64) -> Option<i64> {
        let v = self.int(node, field)?;
        if v < min {
            self.error_at(node, field, format!("must be at least {min}, found {v}"));
            return None;
        }
        Some(v)
    }

    /// An integer in `min..=max` that fits a `u32`.
    pub fn u32_in(&mut self, node: &Node, field: &str, min: u32, max: u32) -> Option<u32> {
        let v = self.int(node, field)?;
        if v < i64::from(min) || v > i64::from(max) {
            self.error_at(
                node,
                field,
                format!("must be between {min} and {max}, found {v}"),
            );
            return None;
        }
        u32::try_from(v).ok()
    }

    pub fn float(&mut self, node: &Node, field: &str) -> Option<f64> {
        let value = match node {
            Node::Scalar(s) => match scalar_value(s) {
                Value::Int(i) => Some(i as f64),
                Value::Float(f) => Some(f),
                _ => None,
            },
            _ => None,
        };
        match value {
            Some(f) if f.is_finite() => Some(f),
            Some(_) => {
                self.error_at(node, field, "expected a finite number");
                None
            }
            None => {
                let found = describe(node);
                self.error_at(node, field, format!("expected a number, found {found}"));
                None
            }
        }
    }

    pub fn bool(&mut self, node: &Node, field: &str) -> Option<bool> {
        if let Node::Scalar(s) = node
            && let Value::Bool(b) = scalar_value(s)
        {
            return Some(b);
        }
        let found = describe(node);
        self.error_at(
            node,
            field,
            format!("expected true or false, found {found}"),
        );
        None
    }

    pub fn duration(&mut self, node: &Node, field: &str) -> Option<Duration> {
        let text = match node {
            Node::Scalar(s) => s.as_str().to_string(),
            other => {
                let found = describe(other);
                self.error_at(other, field, format!("expected a duration, found {found}"));
                return None;
            }
        };
        match parse_duration(&text) {
            Ok(d) if d.is_zero() => {
                self.error_at(node, field, "must be longer than zero");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.error_at(node, field, e);
                None
            }
        }
    }

    /// A scalar of any type (knob and cell values).
    pub fn scalar(&mut self, node: &Node, field: &str) -> Option<Value> {
        match node {
            Node::Scalar(s) => match scalar_value(s) {
                Value::Null => {
                    self.error_at(node, field, "expected a value, found nothing (null)");
                    None
                }
                Value::Float(f) if !f.is_finite() => {
                    self.error_at(node, field, "expected a finite value");
                    None
                }
                v => Some(v),
            },
            other => {
                let found = describe(other);
                self.error_at(
                    other,
                    field,
                    format!("expected a single value, found {found}"),
                );
                None
            }
        }
    }

    /// A mapping of string keys to string values (env, context, tools).
    pub fn string_map(
        &mut self,
        node: &Node,
        field: &str,
    ) -> Option<std::collections::BTreeMap<String, String>> {
        let map = self.mapping(node, field)?;
        let mut out = std::collections::BTreeMap::new();
        for (k, v) in map.iter() {
            let key_field = join(field, k.as_str());
            if let Some(s) = self.string(v, &key_field) {
                out.insert(k.as_str().to_string(), s);
            }
        }
        Some(out)
    }

    /// A list of strings.
    pub fn string_list(&mut self, node: &Node, field: &str) -> Option<Vec<String>> {
        let seq = self.sequence(node, field)?;
        let mut out = Vec::new();
        for (i, item) in seq.iter().enumerate() {
            if let Some(s) = self.string(item, &index(field, i)) {
                out.push(s);
            }
        }
        Some(out)
    }
}

/// Is `name` usable as a study or host name (also a ledger path segment)?
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A required name (study, host) at `map[key]`, checked with
/// [`is_valid_name`]; `what` names it in the message.
pub fn required_name(
    w: &mut Walker,
    map: &MarkedMappingNode,
    field: &str,
    what: &str,
) -> Option<String> {
    let node = w.required(map, field, "name")?;
    let key_field = join(field, "name");
    let name = w.string(node, &key_field)?;
    if !is_valid_name(&name) {
        w.error_at(
            node,
            &key_field,
            format!("`{name}` is not a valid {what} name: use letters, digits, `-`, `_` and `.`"),
        );
    }
    Some(name)
}

/// Is `name` usable as an identifier (knob, cell axis, template variable)?
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Node {
        parse_text(Path::new("t.yaml"), text).expect("valid yaml")
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_key() {
        let node = parse("\u{feff}name: x\nb: 1\n");
        let m = node.as_mapping().expect("mapping");
        assert!(m.get_scalar("name").is_some());
    }

    #[test]
    fn plain_scalars_follow_the_core_schema() {
        let node = parse("a: 1\nb: 1.5\nc: true\nd: '1'\ne: x\nf: ~\ng: 0x10\nh: -3\n");
        let m = node.as_mapping().expect("mapping");
        let v = |k: &str| scalar_value(m.get_scalar(k).expect("scalar"));
        assert_eq!(v("a"), Value::Int(1));
        assert_eq!(v("b"), Value::Float(1.5));
        assert_eq!(v("c"), Value::Bool(true));
        assert_eq!(v("d"), Value::Str("1".into()));
        assert_eq!(v("e"), Value::Str("x".into()));
        assert_eq!(v("f"), Value::Null);
        assert_eq!(v("g"), Value::Int(16));
        assert_eq!(v("h"), Value::Int(-3));
    }

    #[test]
    fn positions_are_one_based() {
        let node = parse("a: 1\nb:\n  c: oops\n");
        let m = node.as_mapping().expect("mapping");
        let b = m.get_mapping("b").expect("b");
        let mut w = Walker::new(Path::new("t.yaml"));
        w.check_keys(b, "b", &["d"]);
        let d = &w.diags.0[0];
        assert_eq!((d.line, d.column), (3, 3));
        assert_eq!(d.field, "b.c");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("soon").is_err());
    }
}
