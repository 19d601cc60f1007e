//! How large a study may be: the most cells, grid configs and (config,
//! cell) pairs a plan may list, counted before anything is listed. The
//! study loader refuses a study past them (`checks.rs`), and so do the plan
//! builder and the launch (`crate::space` re-exports these).

use super::{Strategy, Study};

/// Largest grid enumerated without a budget that bounds it; also the most
/// cells a study may have, and the most (config, cell) pairs a plan may
/// list (see [`check_size`]).
pub const MAX_GRID_ENUMERATION: u64 = 50_000_000;

/// What makes a study too large to plan, and the message that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TooLarge {
    /// Too many cells.
    Cells(String),
    /// A grid too large to list, with no budget that bounds it.
    Grid(String),
    /// Too many (config, cell) pairs.
    Pairs(String),
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TooLarge::Cells(m) | TooLarge::Grid(m) | TooLarge::Pairs(m) => f.write_str(m),
        }
    }
}

/// How many candidates a grid plan lists before the cell constraints: the
/// whole grid, or, under a `budget.max_trials` and no constraint that
/// depends on the cell, as many as the budget can ever run (what
/// plan's shard builder passes to `space::candidates`).
pub fn grid_limit(study: &Study, cells_use_constraints: bool) -> Option<u64> {
    let cells = u64::try_from(study.cell_count()).unwrap_or(u64::MAX);
    let repeats = u64::from(study.measurement.repeats);
    match study.budget.max_trials {
        Some(max) if !cells_use_constraints => {
            Some((max / cells.saturating_mul(repeats).max(1)).saturating_sub(1) + 1)
        }
        _ => None,
    }
}

/// Refuse a study whose plan would list more than [`MAX_GRID_ENUMERATION`]
/// of anything, counted before anything is listed: its cells (the product
/// of its cell axes' lengths), the configs of a grid without a budget that
/// bounds them, and the (config, cell) pairs of a grid or random sweep.
/// The error names the count and the limit; `Ok` says listing is bounded.
/// The study loader checks this (so `validate`, `plan` and `launch` refuse
/// alike, exit 2), and so does the plan builder.
pub fn check_size(study: &Study) -> Result<(), TooLarge> {
    let limit = u128::from(MAX_GRID_ENUMERATION);
    let cells = study.cell_count();
    if cells > limit {
        let axes: Vec<String> = study
            .cells
            .iter()
            .map(|a| format!("{} ({})", a.name, a.values.len()))
            .collect();
        return Err(TooLarge::Cells(format!(
            "the study has {cells} cells (the product of its cell axes' values: {}), more than the {MAX_GRID_ENUMERATION} a study may enumerate; give the cell axes fewer values",
            axes.join(" × ")
        )));
    }
    let uses_cells = study.constraints.iter().any(|c| c.uses_cells);
    let configs = match study.strategy {
        Strategy::Grid => {
            let grid = study.grid_size();
            match grid_limit(study, uses_cells) {
                Some(l) => grid.min(u128::from(l)),
                None if grid > limit => {
                    return Err(TooLarge::Grid(format!(
                        "the grid has {grid} configs, more than the {MAX_GRID_ENUMERATION} a grid study may enumerate; set budget.max_trials, use `strategy: random`, or prune with constraints"
                    )));
                }
                None => grid,
            }
        }
        Strategy::Random { count, .. } => u128::from(count).min(study.grid_size()),
        // Chosen as results arrive: nothing is listed per cell up front.
        Strategy::Hyperband { .. } | Strategy::Tpe { .. } => return Ok(()),
    };
    let pairs = configs.saturating_mul(cells);
    if pairs > limit {
        return Err(TooLarge::Pairs(format!(
            "the plan would list {configs} configs in each of {cells} cells, {pairs} (config, cell) pairs, more than the {MAX_GRID_ENUMERATION} a study may enumerate; set budget.max_trials, sample fewer configs, or give the cell axes fewer values"
        )));
    }
    Ok(())
}
