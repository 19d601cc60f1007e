//! Input files: studies and inventories, parsed from YAML with positions,
//! validated with every problem collected. Nothing here runs a trial.
//!
//! The study file is read in `study/`: `study/mod.rs` holds [`Study`] and
//! reads the sections in order, each parsed and checked in its own file
//! (`knobs.rs` with the knobs' value domains, `cells.rs` with `buckets:`,
//! `constraints.rs`, `trial.rs`, `gate.rs`, `objective.rs` with `metrics:`,
//! `measurement.rs`, `selection.rs`, `strategy.rs` with `budget:`,
//! `fidelity.rs`, `fingerprint.rs`); `checks.rs` checks the study as a
//! whole (templates, size, rendering, warnings) and `parse.rs` holds the
//! small helpers the sections share.

pub mod diag;
pub mod frozen;
pub mod hostpattern;
pub mod inventory;
pub mod result;
pub mod shell;
pub mod study;
pub mod template;
pub mod value;
pub mod yaml;

pub use diag::{Diagnostic, Diagnostics};
pub use frozen::FrozenSpec;
pub use inventory::{Host, Inventory, Transport};
pub use study::{
    Better, BucketRule, DEFAULT_FINALISTS, Fidelity, Knob, KnobKind, MAX_BRACKET_CONFIGS,
    MAX_GRID_ENUMERATION, Measurement, Metric, Proposer, Selection, Strategy, Study, Tolerance,
    TooLarge, cell_label, cells, check_size, grid_limit, hyperband_s_max, round_budget,
};
pub use template::{CommandRenderer, TemplateCheck, TrialVars};
pub use value::Value;
