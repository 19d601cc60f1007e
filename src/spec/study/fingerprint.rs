//! `fingerprint:`: the tools whose versions a host probe records, and the
//! class key, the facts that make a host class.

use std::collections::BTreeMap;

use marked_yaml::Node;

use crate::fingerprint::{ClassField, ClassKey};
use crate::spec::yaml::{Walker, index, join};

/// The `fingerprint:` section: the tools to record, and the class key.
pub(super) fn parse_fingerprint(
    w: &mut Walker,
    node: &Node,
) -> (BTreeMap<String, String>, ClassKey) {
    let Some(map) = w.mapping(node, "fingerprint") else {
        return (BTreeMap::new(), ClassKey::default());
    };
    w.check_keys(map, "fingerprint", &["tools", "class_key"]);
    let tools = match map.get_node("tools") {
        Some(n) => parse_tools(w, n),
        None => BTreeMap::new(),
    };
    let key = match map.get_node("class_key") {
        Some(n) => parse_class_key(w, n, &tools),
        None => ClassKey::default(),
    };
    (tools, key)
}

/// `fingerprint.class_key`: the whole key as a list of fields, or
/// `{add: [...], drop: [...]}` relative to the default key.
fn parse_class_key(w: &mut Walker, node: &Node, tools: &BTreeMap<String, String>) -> ClassKey {
    const FIELD: &str = "fingerprint.class_key";
    let fields = |w: &mut Walker, list: &Node, field: &str| -> Vec<ClassField> {
        let Some(seq) = w.sequence(list, field) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in seq.iter().enumerate() {
            let at = index(field, i);
            let Some(text) = w.string(item, &at) else {
                continue;
            };
            match text.parse::<ClassField>() {
                Ok(ClassField::Tool(name)) if !tools.contains_key(&name) => w.error_at(
                    item,
                    &at,
                    format!(
                        "`tool:{name}` names no tool of `fingerprint.tools` (declare `{name}` there, with the command that prints its version)"
                    ),
                ),
                Ok(f) => out.push(f),
                Err(e) => w.error_at(item, &at, e),
            }
        }
        out
    };
    if node.as_sequence().is_some() {
        return ClassKey::new(fields(w, node, FIELD));
    }
    let Some(map) = w.mapping(node, FIELD) else {
        return ClassKey::default();
    };
    w.check_keys(map, FIELD, &["add", "drop"]);
    let default = ClassKey::default();
    let mut key: Vec<ClassField> = default.fields().to_vec();
    if let Some(n) = map.get_node("drop") {
        let field = join(FIELD, "drop");
        let drop = fields(w, n, &field);
        if let Some(seq) = n.as_sequence() {
            for (i, (f, item)) in drop.iter().zip(seq.iter()).enumerate() {
                if !default.has(f) {
                    w.error_at(
                        item,
                        &index(&field, i),
                        format!(
                            "`{f}` is not in the default key ({}), so there is nothing to drop",
                            default.describe()
                        ),
                    );
                }
            }
        }
        key.retain(|f| !drop.contains(f));
    }
    if let Some(n) = map.get_node("add") {
        key.extend(fields(w, n, &join(FIELD, "add")));
    }
    ClassKey::new(key)
}

fn parse_tools(w: &mut Walker, tools_node: &Node) -> BTreeMap<String, String> {
    let tools = w
        .string_map(tools_node, "fingerprint.tools")
        .unwrap_or_default();
    if let Some(m) = tools_node.as_mapping() {
        for k in m.keys() {
            let name = k.as_str();
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                || name.is_empty()
            {
                w.error(
                    k.span(),
                    &join("fingerprint.tools", name),
                    "tool names use letters, digits, `-` and `_`",
                );
            }
        }
        // Tool commands run at probe time, before any trial: no template
        // variable exists there, and one left in would run as literal text.
        for (k, v) in m.iter() {
            if let Some(command) = v.as_scalar().map(|s| s.as_str())
                && (command.contains("{{") || command.contains("{%"))
            {
                w.error_at(
                    v,
                    &join("fingerprint.tools", k.as_str()),
                    "tool commands are not templates (no `{{ study_dir }}` or other variable is rendered here: they run when the host is probed, in the probe's working directory); name the tool on PATH or by an absolute path",
                );
            }
        }
    }
    tools
}
