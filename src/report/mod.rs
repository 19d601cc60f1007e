//! Judging results and showing them: per host class and cell, the
//! baseline, the winner or why there is none, and every rejected config
//! with its reason. No number leaves this module without its n, spread,
//! unit, host class, baseline and workload context.
//!
//! This module chooses the format ([`Format`], [`render_sized`]) and writes
//! the JSON; [`render`](mod@render) holds what the formats share, which
//! [`terminal`] and [`html`] use.

pub mod data;
pub mod html;
pub mod render;
pub mod terminal;
pub mod verdicts;

pub use verdicts::{analyze_ledger, write_verdicts};

use crate::decide::Analysis;
use render::{render_csv, render_markdown, render_measurements};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The terminal report, for people (`text`, as the other commands call
    /// it, is the same).
    #[value(alias = "text")]
    Table,
    Markdown,
    Json,
    Csv,
    /// CSV, one row per (config, host class, cell) with what was measured
    /// and no decision: the rows of `--shard` reports concatenate to a full
    /// run's.
    Measurements,
    /// One self-contained HTML page: what ships, charts and the evidence
    /// tables; it loads nothing from the network.
    Html,
    /// CSV, one row per sample of the objective (host class, cell, config,
    /// host, value): every run, for your own analysis.
    Samples,
}

/// The JSON report: the analysis under its schema name (docs/json.md).
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    schema: &'static str,
    #[serde(flatten)]
    analysis: &'a Analysis,
}

/// [`render_sized`] at the width of [`terminal::width`] without `--width`.
pub fn render(a: &Analysis, format: Format, all: bool) -> String {
    render_sized(a, format, all, terminal::width(None))
}

/// `a` in `format`; the table fits in `width` columns.
pub fn render_sized(a: &Analysis, format: Format, all: bool, width: usize) -> String {
    match format {
        // Text for people: values from studies and hosts are shown escaped
        // (crate::term); cells are escaped one by one, the rest as a block.
        Format::Table => crate::term::escape_block(&terminal::render(a, all, width)).into_owned(),
        Format::Markdown => crate::term::escape_block(&render_markdown(a, all)).into_owned(),
        Format::Json => {
            let doc = JsonReport {
                schema: crate::schema::REPORT,
                analysis: a,
            };
            crate::term::json_pretty(&doc).unwrap_or_default() + "\n"
        }
        Format::Csv => render_csv(a),
        Format::Measurements => render_measurements(a, &|_| None, &|_| true),
        Format::Html => html::render_html(a, all),
        Format::Samples => render::render_samples(a),
    }
}
