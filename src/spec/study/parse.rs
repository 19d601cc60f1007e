//! Small helpers the study's section parsers share: a duration as seconds
//! in the frozen spec, relative paths that stay inside their directory,
//! lists of names in messages, where a top-level key is.

use std::path::Path;
use std::time::Duration;

pub(super) fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Whether `path` names something inside the directory it is relative to:
/// not empty, not absolute, no `..` component.
pub(super) fn stays_inside(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && !p.is_absolute()
        && !p
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
}

/// The span of a top-level key (where a problem of its whole section is
/// reported: a block mapping's own span starts at its first key's colon).
pub(super) fn top_key_span<'a>(
    map: &'a marked_yaml::types::MarkedMappingNode,
    key: &str,
) -> Option<&'a marked_yaml::Span> {
    map.keys().find(|k| k.as_str() == key).map(|k| k.span())
}

pub(super) fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Why `name` cannot name a knob or a cell axis because tunectl's own
/// template functions take names with its prefix; `None` when it can.
pub(super) fn own_prefix_problem(name: &str) -> Option<String> {
    let prefix = crate::spec::template::RESERVED_PREFIX;
    name.starts_with(prefix).then(|| {
        format!("`{name}`: names starting with `{prefix}` are reserved for tunectl's own template functions")
    })
}
