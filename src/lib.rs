//! tunectl: find, per class of machine, the fastest setting of a workload's
//! performance knobs that neither crashes nor changes the output.
//!
//! The way through: [`spec`] (study and inventory files) → [`plan`] (the
//! trial DAG) → [`launch`] (schedule trials and run them on hosts through
//! [`transport`]) → [`ledger`] (append-only records) → [`report`]
//! (per-host-class winners with their evidence).

pub mod canon;
pub mod cli;
pub mod commands;
pub mod decide;
pub mod fingerprint;
pub mod fmt;
pub mod launch;
#[cfg(test)]
mod layering;
pub mod ledger;
pub mod plan;
pub mod report;
pub mod safe_read;
pub mod schema;
pub mod scrub;
pub mod search;
pub mod shell_quote;
pub mod space;
pub mod spec;
pub mod stats;
pub mod term;
pub mod transport;
pub mod trial;
pub mod tuned;
pub mod yaml_out;
