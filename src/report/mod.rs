//! Judging results and showing them: per host class and cell, the
//! baseline, the winner or why there is none, and every rejected config
//! with its reason. No number leaves this module without its n, spread,
//! unit, host class, baseline and workload context.

pub mod html;
pub mod render;
pub mod terminal;
pub mod verdicts;

pub use render::{Format, render};
pub use verdicts::{analyze_ledger, write_verdicts};
