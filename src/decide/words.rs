//! The one place a bucket's decision, its level's reasons, its refusals
//! and its racing are worded. The decisions are built as the types below;
//! reports, JSON and the launch read their `Display` (JSON serialises the
//! same text), and code and tests match on the types.

use super::*;

/// What a bucket's decision is, and on what evidence.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// A cell's baseline failed or is not measured: nothing can ship.
    BaselineUnusable {
        cell: String,
        why: BaselineBecause,
    },
    /// A cell was given up on before its sweep finished.
    CellDropped {
        cell: String,
        note: CellNote,
    },
    /// The first config that won on its intervals was refused.
    Refused(Refusal),
    /// Racing goes on and nothing wins yet.
    NotYetShown {
        best: Best,
    },
    /// At the cap, the best interval still straddles the minimum.
    NotShownAtCap {
        best: Best,
        runs: usize,
        max_repeats: u32,
    },
    /// The best candidate is shown below the minimum.
    NoImprovement {
        best: Best,
    },
    /// Candidates measured everywhere, with too few runs somewhere for an
    /// interval.
    TooFewRuns {
        candidates: usize,
        min_samples: usize,
    },
    /// Candidates not measured at every cell yet.
    NotMeasuredEverywhere {
        candidates: usize,
    },
    NothingMeasured,
    NothingPassedTheGate,
    /// A winner on the sweep's evidence (`for_now`: racing goes on).
    Wins {
        label: String,
        sweep: SweepWin,
        for_now: bool,
    },
    /// The winner failed outright in the final round.
    RoundFailed {
        label: String,
        failure: RoundFailure,
    },
    /// The final round did not confirm the winner.
    NotConfirmed {
        label: String,
        sweep_speedup: f64,
        measured: RoundMeasure,
        because: NotConfirmedBecause,
    },
}

/// The best candidate where nothing wins, with its interval over the
/// bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Best {
    pub label: String,
    pub interval: Interval,
    pub min_improvement: f64,
}

/// Runs at every cell that would likely (90 %) settle an interval that
/// straddles the minimum, if its estimate is right: its standard error (in
/// logs, the half-width over Student's t at about `runs + reference_runs −
/// 2` degrees of freedom) shrinks as 1/√runs, and the decision is made once
/// the estimate stands `t₀.₉₇₅ + t₀.₉₀` standard errors from the minimum.
/// `None` beyond ten times `runs`.
fn runs_to_settle(best: &Best, runs: usize) -> Option<usize> {
    use crate::stats::speedup::t_quantile;
    let i = &best.interval;
    if runs == 0 || i.low <= 0.0 || i.speedup <= 0.0 {
        return None;
    }
    let df = (i.runs + i.reference_runs).saturating_sub(2).max(1) as f64;
    let se = (i.speedup.ln() - i.low.ln()) / t_quantile(df, 0.5 + i.confidence / 2.0);
    let distance = (i.speedup.ln() - (1.0 + best.min_improvement).ln()).abs();
    (runs..=10 * runs).find(|&n| {
        let scale = n as f64 / runs as f64;
        let t = t_quantile(df * scale, 0.5 + i.confidence / 2.0) + t_quantile(df * scale, 0.9);
        t * se / scale.sqrt() <= distance
    })
}

/// Why a winner wins on the sweep's evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepWin {
    pub interval: Interval,
    pub lowest_cell: f64,
    pub min_improvement: f64,
    /// The fastest config, when the tie rule picked another shown
    /// equivalent to it.
    pub tie_with: Option<String>,
}

/// What the final round measured: its interval, or its speedup alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RoundMeasure {
    Interval(Interval),
    Speedup(f64),
}

impl RoundMeasure {
    pub(super) fn of(c: &Confirmation) -> RoundMeasure {
        match c.interval {
            Some(i) => RoundMeasure::Interval(i),
            None => RoundMeasure::Speedup(c.speedup),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum NotConfirmedBecause {
    SlowerAt(String),
    BelowMinimum(f64),
}

/// Why a config that won on its intervals does not ship.
#[derive(Debug, Clone, PartialEq)]
pub enum RefusalReason {
    /// Faster over the bucket, shown slower at one cell.
    SlowerAt {
        overall: f64,
        cell: String,
        speedup: f64,
    },
    /// Failed outright in the final round.
    RoundFailed(RoundFailure),
    NotConfirmed,
}

/// Why a bucket's decision is at its level (several can hold: they are
/// joined by `; `).
#[derive(Debug, Clone, PartialEq)]
pub enum LevelReason {
    /// The baseline failed its first run and its re-run at a cell.
    BaselineFailsReproducibly,
    BaselineNotMeasuredEverywhere,
    CellDroppedMidSweep,
    NothingMeasured,
    TooFewRuns {
        candidates: usize,
        min_samples: usize,
    },
    NotMeasuredEverywhere {
        candidates: usize,
    },
    /// Cells dropped, each as `cell: note`.
    CellsDropped(Vec<(String, CellNote)>),
    Racing {
        racing: Racing,
        max_repeats: u32,
    },
    AllMeasured,
    AwaitingRound {
        done: Option<(usize, u32)>,
    },
    WinnerFailedRound,
    WinnerNotConfirmed,
    NoRound,
    FewRepeats {
        least: usize,
        repeats: u32,
    },
    FewHosts {
        hosts: usize,
        min_hosts: u32,
    },
    Confirmed(RoundMeasure),
    /// No plan recorded for the host class at all.
    NoPlan,
    /// Planned trials not ended, searches not over, cells without a plan.
    Unfinished(Unfinished),
}

/// What keeps a bucket's evidence incomplete.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Unfinished {
    /// Trials not ended, of those planned, and by cell.
    pub left: u64,
    pub planned: u64,
    pub pending: Vec<(String, u64)>,
    /// Cells whose search has not chosen its finalists.
    pub searching: Vec<String>,
    /// Cells with no plan recorded.
    pub missing_plan: Vec<String>,
}

/// Why a config is raced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaceWhy {
    Straddles,
    CloseToLeader,
    Leader,
    /// Not shown to be at most the minimum faster than what would ship.
    MayBeatPick,
    /// What would ship, against a contender that may beat it.
    Pick,
}

/// The reasons of a level, worded and joined.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LevelReasons(pub Vec<LevelReason>);

impl LevelReasons {
    pub fn one(r: LevelReason) -> LevelReasons {
        LevelReasons(vec![r])
    }
}

fn pct(x: f64) -> Pct {
    Pct(x)
}

/// A fraction as a percentage with one decimal (`2.0%`).
struct Pct(f64);

impl fmt::Display for Pct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}%", self.0 * 100.0)
    }
}

/// `n` and the singular or plural words after it.
fn count<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

impl fmt::Display for Best {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the best, {}, is {} over the bucket",
            self.label,
            IntervalText(&self.interval)
        )
    }
}

impl fmt::Display for RoundMeasure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoundMeasure::Interval(i) => IntervalText(i).fmt(f),
            RoundMeasure::Speedup(s) => write!(f, "{s:.3}×"),
        }
    }
}

impl fmt::Display for SweepWin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} over the bucket (geometric mean; lowest cell {:.2}×), its lower bound above the {} minimum, shown slower nowhere",
            IntervalText(&self.interval),
            self.lowest_cell,
            pct(self.min_improvement)
        )?;
        if let Some(leader) = &self.tie_with {
            write!(
                f,
                "; shown equivalent to the fastest ({leader}) within {}, it changes fewer knobs",
                pct(self.min_improvement)
            )?;
        }
        Ok(())
    }
}

impl Decision {
    /// A stable word for what was decided, for programs (JSON `outcome`):
    /// the variant in snake case. The wording (`Display`) may change; this
    /// does not.
    pub fn code(&self) -> &'static str {
        match self {
            Decision::BaselineUnusable { .. } => "baseline_unusable",
            Decision::CellDropped { .. } => "cell_dropped",
            Decision::Refused(_) => "refused",
            Decision::NotYetShown { .. } => "not_yet_shown",
            Decision::NotShownAtCap { .. } => "not_shown_at_cap",
            Decision::NoImprovement { .. } => "no_improvement",
            Decision::TooFewRuns { .. } => "too_few_runs",
            Decision::NotMeasuredEverywhere { .. } => "not_measured_everywhere",
            Decision::NothingMeasured => "nothing_measured",
            Decision::NothingPassedTheGate => "nothing_passed_the_gate",
            Decision::Wins { for_now: false, .. } => "wins",
            Decision::Wins { for_now: true, .. } => "wins_for_now",
            Decision::RoundFailed { .. } => "round_failed",
            Decision::NotConfirmed { .. } => "not_confirmed",
        }
    }
}

impl LevelReason {
    /// A stable word for the reason, for programs (JSON `level_because`).
    pub fn code(&self) -> &'static str {
        match self {
            LevelReason::BaselineFailsReproducibly => "baseline_fails_reproducibly",
            LevelReason::BaselineNotMeasuredEverywhere => "baseline_not_measured_everywhere",
            LevelReason::CellDroppedMidSweep => "cell_dropped_mid_sweep",
            LevelReason::NothingMeasured => "nothing_measured",
            LevelReason::TooFewRuns { .. } => "too_few_runs",
            LevelReason::NotMeasuredEverywhere { .. } => "not_measured_everywhere",
            LevelReason::CellsDropped(_) => "cells_dropped",
            LevelReason::Racing { .. } => "racing",
            LevelReason::AllMeasured => "all_measured",
            LevelReason::AwaitingRound { .. } => "awaiting_round",
            LevelReason::WinnerFailedRound => "winner_failed_round",
            LevelReason::WinnerNotConfirmed => "winner_not_confirmed",
            LevelReason::NoRound => "no_round",
            LevelReason::FewRepeats { .. } => "few_repeats",
            LevelReason::FewHosts { .. } => "few_hosts",
            LevelReason::Confirmed(_) => "confirmed",
            LevelReason::NoPlan => "no_plan",
            LevelReason::Unfinished(_) => "unfinished",
        }
    }
}

impl LevelReasons {
    /// Each reason's [`LevelReason::code`], in order.
    pub fn codes(&self) -> Vec<&'static str> {
        self.0.iter().map(LevelReason::code).collect()
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::BaselineUnusable { cell, why } => {
                write!(f, "baseline kept: {why} at {cell}")
            }
            Decision::CellDropped { cell, note } => {
                write!(f, "baseline kept: cell {cell} was {note}")
            }
            Decision::Refused(r) => write!(
                f,
                "baseline kept: {} refused by {} ({})",
                r.config_label, r.cell_label, r.reason
            ),
            Decision::NotYetShown { best } => write!(
                f,
                "baseline kept for now: {best}, not yet shown to beat the {} minimum: measuring more",
                pct(best.min_improvement)
            ),
            Decision::NotShownAtCap {
                best,
                runs,
                max_repeats,
            } => {
                write!(
                    f,
                    "baseline kept: {best} after {runs} runs at every cell: not shown to beat the {} minimum (measurement.max_repeats = {max_repeats} reached",
                    pct(best.min_improvement)
                )?;
                match runs_to_settle(best, *runs) {
                    Some(n) => write!(f, "; about {n} runs at every cell would likely settle it)"),
                    None => write!(
                        f,
                        "; its estimate is too near the minimum for ten times the runs to settle it)"
                    ),
                }
            }
            Decision::NoImprovement { best } => write!(
                f,
                "baseline kept: no improvement ({best}: shown below the {} minimum)",
                pct(best.min_improvement)
            ),
            Decision::TooFewRuns {
                candidates,
                min_samples,
            } => write!(
                f,
                "baseline kept for now: {candidates} {} fewer than two runs or selection.min_samples = {min_samples} samples at some cell (no interval of the speedup)",
                count(*candidates, "candidate has", "candidates have")
            ),
            Decision::NotMeasuredEverywhere { candidates } => write!(
                f,
                "baseline kept for now: {candidates} {} not measured at every cell yet",
                count(*candidates, "candidate is", "candidates are")
            ),
            Decision::NothingMeasured => {
                f.write_str("baseline kept for now: no candidate has been measured yet")
            }
            Decision::NothingPassedTheGate => {
                f.write_str("baseline kept: no candidate passed the gate at every cell")
            }
            Decision::Wins {
                label,
                sweep,
                for_now,
            } => {
                let wins = if *for_now { "wins for now" } else { "wins" };
                write!(f, "{label} {wins}: {sweep}")
            }
            Decision::RoundFailed { label, failure } => write!(
                f,
                "baseline kept: {label} failed its final round against the baseline: {failure}"
            ),
            Decision::NotConfirmed {
                label,
                sweep_speedup,
                measured,
                because,
            } => write!(
                f,
                "baseline kept: {label} looked {sweep_speedup:.2}× faster in the sweep but the final interleaved round measured {measured}, {because}"
            ),
        }
    }
}

impl fmt::Display for NotConfirmedBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotConfirmedBecause::SlowerAt(cell) => {
                write!(f, "shown slower than the baseline at {cell}")
            }
            NotConfirmedBecause::BelowMinimum(t) => {
                write!(f, "its lower bound not above the {} minimum", pct(*t))
            }
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::SlowerAt {
                overall,
                cell,
                speedup,
            } => write!(
                f,
                "{overall:.2}× overall but shown slower than the baseline at {cell} ({speedup:.3}×, its interval below 1): no harm anywhere"
            ),
            RefusalReason::RoundFailed(failure) => failure.fmt(f),
            RefusalReason::NotConfirmed => {
                f.write_str("not confirmed in the final interleaved round")
            }
        }
    }
}

impl fmt::Display for RaceWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RaceWhy::Straddles => "its interval straddles the minimum",
            RaceWhy::CloseToLeader => "it is too close to the leader to call",
            RaceWhy::Leader => "the leader, against a close contender",
            RaceWhy::MayBeatPick => "it may beat what would ship by more than the minimum",
            RaceWhy::Pick => "what would ship, against a contender that may beat it",
        })
    }
}

impl fmt::Display for Unfinished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if self.left > 0 {
            write!(
                f,
                "{} of {} planned trials have not ended (",
                self.left, self.planned
            )?;
            for (i, (cell, n)) in self.pending.iter().enumerate() {
                write!(f, "{}{cell}: {n}", if i > 0 { ", " } else { "" })?;
            }
            f.write_str(")")?;
            sep = "; ";
        }
        if !self.searching.is_empty() {
            write!(
                f,
                "{sep}the search has not chosen its finalists at {}",
                self.searching.join(", ")
            )?;
            sep = "; ";
        }
        if !self.missing_plan.is_empty() {
            write!(
                f,
                "{sep}no plan is recorded for {}: launch again to record it",
                self.missing_plan.join(", ")
            )?;
        }
        Ok(())
    }
}

impl Unfinished {
    pub(super) fn any(&self) -> bool {
        self.left > 0 || !self.searching.is_empty() || !self.missing_plan.is_empty()
    }
}

impl fmt::Display for LevelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LevelReason::BaselineFailsReproducibly => f.write_str(
                "the baseline fails here reproducibly (its first run and its re-run): an error of the study, not a verdict; fix it and launch again",
            ),
            LevelReason::BaselineNotMeasuredEverywhere => {
                f.write_str("the baseline is not measured at every cell yet")
            }
            LevelReason::CellDroppedMidSweep => f.write_str(
                "a cell of the bucket was dropped before its sweep finished; launch again when the host is stable",
            ),
            LevelReason::NothingMeasured => f.write_str("no candidate has been measured yet"),
            LevelReason::TooFewRuns {
                candidates,
                min_samples,
            } => write!(
                f,
                "{} {} fewer than two runs or selection.min_samples = {min_samples} samples at some cell: no interval of {} speedup is known",
                crate::fmt::count(*candidates as u64, "candidate", "candidates"),
                if *candidates == 1 { "has" } else { "have" },
                if *candidates == 1 { "its" } else { "their" },
            ),
            LevelReason::NotMeasuredEverywhere { candidates } => write!(
                f,
                "{} {} not measured at every cell yet",
                crate::fmt::count(*candidates as u64, "candidate", "candidates"),
                if *candidates == 1 { "is" } else { "are" },
            ),
            LevelReason::CellsDropped(cells) => {
                f.write_str("cells were dropped: ")?;
                for (i, (cell, note)) in cells.iter().enumerate() {
                    write!(f, "{}{cell}: {note}", if i > 0 { "; " } else { "" })?;
                }
                Ok(())
            }
            LevelReason::Racing {
                racing,
                max_repeats,
            } => {
                let k = racing.configs.len();
                write!(
                    f,
                    "racing: {k} {} too close to call, measured up to {} runs at every cell (measurement.max_repeats = {max_repeats}): ",
                    count(k, "config is", "configs are"),
                    racing.runs
                )?;
                for (i, (label, why)) in racing.why.iter().enumerate() {
                    write!(f, "{}{label}: {why}", if i > 0 { "; " } else { "" })?;
                }
                Ok(())
            }
            LevelReason::AllMeasured => {
                f.write_str("every eligible candidate was measured at every cell")
            }
            LevelReason::AwaitingRound { done } => {
                f.write_str("awaiting the final interleaved round against the baseline")?;
                if let Some((done, rounds)) = done {
                    write!(f, ": {done} of {rounds} runs a side at every cell measured")?;
                }
                Ok(())
            }
            LevelReason::WinnerFailedRound => {
                f.write_str("the sweep's winner failed in the confirmation round")
            }
            LevelReason::WinnerNotConfirmed => {
                f.write_str("the sweep's winner was not confirmed against the baseline")
            }
            LevelReason::NoRound => {
                f.write_str("no confirmation round (measurement.confirm_repeats is 0)")
            }
            LevelReason::FewRepeats { least, repeats } => {
                write!(f, "only {least} of {repeats} repeats at some cell")
            }
            LevelReason::FewHosts { hosts, min_hosts } => write!(
                f,
                "measured on {hosts} hosts, fewer than selection.min_hosts = {min_hosts}"
            ),
            LevelReason::Confirmed(m) => {
                write!(f, "confirmed in the final interleaved round: {m}")
            }
            LevelReason::NoPlan => f.write_str(
                "the ledger holds no plan for this host class (launched by an older tunectl, or only with --shard): launch again to record it",
            ),
            LevelReason::Unfinished(u) => u.fmt(f),
        }
    }
}

impl fmt::Display for LevelReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            write!(f, "{}{r}", if i > 0 { "; " } else { "" })?;
        }
        Ok(())
    }
}

/// An interval as reports write it: `1.08× [1.05, 1.11] 95% CI, n=24 vs
/// 60 runs`.
pub struct IntervalText<'a>(pub &'a Interval);

impl fmt::Display for IntervalText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.0;
        write!(
            f,
            "{:.3}× [{:.3}, {:.3}] {:.0}% CI, n={} vs {} runs",
            i.speedup,
            i.low,
            i.high,
            i.confidence * 100.0,
            i.runs,
            i.reference_runs
        )?;
        if i.samples_as_runs {
            f.write_str(" (a single run's samples taken as runs: run-to-run variation unknown)")?;
        }
        Ok(())
    }
}

macro_rules! serialize_as_text {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )*};
}

serialize_as_text!(Decision, RefusalReason, LevelReasons);

/// What a cell's decision is ("fastest here": what ships is decided per
/// bucket).
#[derive(Debug, Clone, PartialEq)]
pub enum CellDecision {
    /// The baseline has not run at the cell yet.
    BaselinePending,
    /// The baseline failed once, alone: its re-run is due.
    BaselineRetry {
        failure: String,
    },
    /// The baseline failed reproducibly.
    BaselineFailed {
        failure: String,
    },
    /// The baseline ran but recorded no measurement yet.
    BaselineUnmeasured,
    /// The baseline has fewer than `selection.min_samples` samples.
    BaselineFewSamples {
        samples: usize,
        min_samples: usize,
    },
    /// Candidates without an interval of their speedup.
    TooFewRuns {
        min_samples: usize,
    },
    /// The cell was dropped before anything of it survived.
    Dropped(CellNote),
    /// The cell is planned and nothing has run at it yet.
    NothingRun,
    NoEligible,
    /// `label` is fastest here (`tie_with`: the fastest, when the tie rule
    /// picked another shown equivalent to it).
    Fastest {
        label: String,
        interval: Option<Interval>,
        min_improvement: f64,
        tie_with: Option<String>,
    },
    /// The best candidate is not shown to beat the minimum.
    NoImprovementShown {
        best: String,
        interval: Option<Interval>,
        min_improvement: f64,
    },
}

impl CellDecision {
    /// Nothing is decided at the cell yet: its baseline is still to run.
    pub fn pending(&self) -> bool {
        matches!(
            self,
            CellDecision::BaselinePending
                | CellDecision::BaselineRetry { .. }
                | CellDecision::BaselineUnmeasured
                | CellDecision::NothingRun
        )
    }
}

/// An optional interval, as reports write it (nothing when unknown).
struct MaybeInterval<'a>(&'a Option<Interval>);

impl fmt::Display for MaybeInterval<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(i) => IntervalText(i).fmt(f),
            None => Ok(()),
        }
    }
}

impl fmt::Display for CellDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CellDecision::BaselinePending => {
                f.write_str("pending: the baseline has not run here yet")
            }
            CellDecision::BaselineRetry { failure } => write!(
                f,
                "pending: the baseline failed once ({failure}); it runs once more before the failure is believed"
            ),
            CellDecision::BaselineFailed { failure } => {
                write!(f, "baseline failed ({failure}); nothing can win here")
            }
            CellDecision::BaselineUnmeasured => {
                f.write_str("pending: the baseline has no measurements yet")
            }
            CellDecision::BaselineFewSamples {
                samples,
                min_samples,
            } => write!(
                f,
                "no decision: the baseline has {samples} samples here, fewer than selection.min_samples = {min_samples}: its spread is unknown and nothing wins on it"
            ),
            CellDecision::TooFewRuns { min_samples } => write!(
                f,
                "no decision: the candidates have fewer than two runs or selection.min_samples = {min_samples} samples here: no interval of their speedup is known and nothing wins on it"
            ),
            CellDecision::NoEligible => f.write_str("baseline kept: no eligible candidate"),
            CellDecision::Dropped(note) => note.fmt(f),
            CellDecision::NothingRun => f.write_str("pending: nothing has run at this cell yet"),
            CellDecision::Fastest {
                label,
                interval,
                min_improvement,
                tie_with,
            } => {
                write!(
                    f,
                    "{label} is fastest here: {}, its lower bound above the {} minimum",
                    MaybeInterval(interval),
                    pct(*min_improvement)
                )?;
                if let Some(leader) = tie_with {
                    write!(
                        f,
                        "; shown equivalent to the fastest ({leader}) within {}, it changes fewer knobs",
                        pct(*min_improvement)
                    )?;
                }
                Ok(())
            }
            CellDecision::NoImprovementShown {
                best,
                interval,
                min_improvement,
            } => write!(
                f,
                "no improvement shown: the best candidate ({best}) is {}, not shown to beat the {} minimum",
                MaybeInterval(interval),
                pct(*min_improvement)
            ),
        }
    }
}

/// Why a cell's baseline cannot carry a bucket.
#[derive(Debug, Clone, PartialEq)]
pub enum BaselineBecause {
    /// The cell's own decision (its baseline is pending or failed).
    Cell(CellDecision),
    /// The cell was dropped.
    Dropped(CellNote),
}

impl fmt::Display for BaselineBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BaselineBecause::Cell(d) => d.fmt(f),
            BaselineBecause::Dropped(n) => n.fmt(f),
        }
    }
}

serialize_as_text!(CellDecision);
