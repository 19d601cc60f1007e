//! `tunectl report`: per host class and cell, the baseline, the winner and
//! the rejected configs, from the ledger.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::inputs::{Use, load_analysis};
use super::{CliError, note};
use crate::plan::Plan;
use crate::report;
use crate::space::ConfigSpace;
use crate::spec::Study;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A study file, or a study id in the ledger.
    pub study: String,
    /// Ledger URL or path (default: the study file's `ledger`, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Output format (`json`: docs/json.md).
    #[arg(long, value_enum, default_value_t = crate::report::Format::Table)]
    pub format: crate::report::Format,
    /// Show every eligible config, not only the baseline, the best and the
    /// rejected, and every rejected config at every cell instead of groups.
    #[arg(long)]
    pub all: bool,
    /// Columns the table fits (default: `COLUMNS`, else the terminal's,
    /// else 100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(40..))]
    pub width: Option<u16>,
    /// Only the configs of one shard of a grid (`i/n`, as given to launch);
    /// needs the study file. With `--format measurements`, the rows of
    /// shards 1/n .. n/n concatenated equal those of the full grid.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    pub shard: Option<crate::search::Shard>,
    /// Write the report to FILE instead of stdout (any format; `html` is
    /// one self-contained page).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
}

/// Render the analysis (of one shard's configs with `--shard`).
pub async fn run(a: ReportArgs) -> Result<(), CliError> {
    // Not freed: the process ends with this command, and freeing the
    // analysis of 100,000 attempts took a twentieth of an indexed report's
    // time.
    let analysis =
        std::mem::ManuallyDrop::new(load_analysis(&a.study, a.ledger.as_deref(), Use::Show).await?);
    let width = report::terminal::width(a.width.map(usize::from));
    let study = Path::new(&a.study)
        .is_file()
        .then(|| Study::load(Path::new(&a.study)))
        .transpose()?;
    // The study's candidate order (baseline first) orders measurement rows
    // and tells a shard's configs.
    let order: Option<(HashMap<u64, u64>, ConfigSpace, HashSet<u64>)> = match &study {
        Some(s) if s.strategy == crate::spec::Strategy::Grid => {
            let space = ConfigSpace::new(s).map_err(CliError::Invalid)?;
            let all = Plan::grid_candidates(s, &space).map_err(CliError::Invalid)?;
            let pos: HashMap<u64, u64> = std::iter::once(space.baseline())
                .chain(all.iter().copied())
                .enumerate()
                .map(|(i, c)| (c, i as u64))
                .collect();
            let mine: HashSet<u64> = match a.shard {
                Some(sh) => sh.select(&all).iter().copied().collect(),
                None => all.iter().copied().collect(),
            };
            Some((pos, space, mine))
        }
        _ => None,
    };
    let Some(sh) = a.shard else {
        let text = match (a.format, &order, &study) {
            (report::Format::Measurements, Some((pos, space, _)), Some(s)) => {
                report::render::render_measurements(
                    &analysis,
                    &|c| space.index_of(s, c).and_then(|i| pos.get(&i).copied()),
                    &|_| true,
                )
            }
            _ => report::render_sized(&analysis, a.format, a.all, width),
        };
        return emit(a.output.as_deref(), &text);
    };
    let (Some((pos, space, mine)), Some(s)) = (&order, &study) else {
        return Err(CliError::Invalid(format!(
            "--shard {sh}: needs the study file of a grid study (a study id does not say which configs each shard holds)"
        )));
    };
    let in_shard = |c: &serde_json::Value| {
        space.index_of(s, c).is_some_and(|i| {
            // The baseline's rows belong to the first shard.
            mine.contains(&i) || (i == space.baseline() && sh.index() == 1)
        })
    };
    let text = match a.format {
        report::Format::Measurements => report::render::render_measurements(
            &analysis,
            &|c| space.index_of(s, c).and_then(|i| pos.get(&i).copied()),
            &in_shard,
        ),
        _ => {
            let mut analysis = analysis;
            for class in &mut analysis.classes {
                for cell in &mut class.cells {
                    cell.eligible.retain(|r| in_shard(&r.config));
                    cell.rejected.retain(|r| in_shard(&r.config));
                }
            }
            note!(
                "note: shard {sh}: only this shard's configs are listed; decisions (fastest, what ships) are those of the whole ledger"
            );
            report::render_sized(&analysis, a.format, a.all, width)
        }
    };
    emit(a.output.as_deref(), &text)
}

/// The report on stdout, or in `output` when given.
fn emit(output: Option<&Path>, text: &str) -> Result<(), CliError> {
    match output {
        None => {
            crate::term::out(text);
            Ok(())
        }
        Some(path) => std::fs::write(path, text)
            .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display()))),
    }
}
