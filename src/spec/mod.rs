//! Input files: studies and inventories, parsed from YAML with positions,
//! validated with every problem collected. Nothing here runs a trial.

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
    Better, BucketRule, DEFAULT_FINALISTS, Fidelity, Knob, KnobKind, Measurement, Metric, Proposer,
    Selection, Strategy, Study, Tolerance,
};
pub use template::{CommandRenderer, TemplateCheck, TrialVars};
pub use value::Value;
