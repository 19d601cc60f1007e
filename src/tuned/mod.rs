//! Tuned files: the per-host-class result of a study, as `tunectl export`
//! writes it and `tunectl apply` reads it (format: docs/tuned.md).
//!
//! A tuned file holds, for one host class, the config that ships in every
//! bucket of cells, with its evidence. It applies only on a host whose
//! fingerprint has the same class; anywhere else `apply` falls back to the
//! study's defaults (the baseline), never to a tune measured on other
//! hardware.
//!
//! The code is split by concern: `format.rs` is the file itself (its
//! types, reading and parsing it, and the checks of the knob values it
//! holds), `export.rs` builds and writes it from a study's analysis,
//! `apply.rs` chooses the entry for a host and cell and makes the
//! command's environment; what they share is here.

mod apply;
mod export;
mod format;
#[cfg(test)]
mod tests;

pub use apply::{
    Choice, Source, ThisHost, apply_overrides, bucket_axes, cell_axes, check_cell_axes,
    check_overrides, choose, environment, knob_list, knob_var, parse_cell, print_yaml,
    template_vars,
};
pub use export::{export, is_pending, slug};
pub use format::{
    TUNED_FILE, TunedBucket, TunedClassKey, TunedFile, TunedJudging, check_domains, load,
    node_to_json, parse, yaml_files,
};

use serde::Deserialize;

use crate::yaml_out::Yaml;

/// Layout version of a tuned file.
pub const SCHEMA: u32 = 1;

/// A bucket's level in a tuned file: the report's level, or `pending`
/// when nothing decided it yet (what `apply` ships there is the baseline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TunedLevel {
    Verdict,
    Draft,
    Pending,
}

impl TunedLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            TunedLevel::Verdict => "verdict",
            TunedLevel::Draft => "draft",
            TunedLevel::Pending => "pending",
        }
    }
}

impl From<crate::decide::Level> for TunedLevel {
    fn from(l: crate::decide::Level) -> TunedLevel {
        match l {
            crate::decide::Level::Verdict => TunedLevel::Verdict,
            crate::decide::Level::Draft => TunedLevel::Draft,
        }
    }
}

impl std::fmt::Display for TunedLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

/// Text keys and values as a YAML mapping, in their order (a study's
/// context and class-key tools, `apply --print`'s environment).
fn text_map<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> Yaml {
    Yaml::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.clone(), Yaml::from(v)))
            .collect(),
    )
}
