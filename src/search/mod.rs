//! Adaptive search: which configs to try, at which budget, in which order.
//!
//! Pure algorithms over config indices (the mixed-radix `u64`s of
//! [`crate::space::ConfigSpace`]): nothing here runs a trial, reads a
//! ledger, knows a host or prints. The scheduler asks for the next config
//! and reports outcomes; `plan` reads the static shapes.
//!
//! - [`hyperband`]: Hyperband brackets and rungs (Li et al., JMLR 2018) and
//!   [`Asha`], asynchronous successive halving over them (Li et al., MLSys
//!   2020), with promotion of the top survivors to the objective metric.
//! - [`tpe`]: [`Tpe`], a Tree-structured Parzen Estimator (Bergstra et al.,
//!   NeurIPS 2011) over the knobs' value lists, warm-startable from earlier
//!   observations.
//! - [`proposer`]: [`ModelProposer`], Hyperband's new configs drawn from
//!   per-budget TPE models of the results so far (BOHB-like), a third of
//!   them uniform.
//! - [`driver`]: [`Search`], one search as the scheduler drives it, with
//!   decisions that do not depend on the order results arrive in.
//! - [`prune`]: [`PruneRule`], when a running job is stopped early from
//!   its readings (`fidelity.prune`).
//! - [`shard`]: [`Shard`], `--shard i/n`, a deterministic split of an
//!   ordered candidate list into contiguous ranges.

pub mod driver;
pub mod hyperband;
pub mod proposer;
pub mod prune;
pub mod shard;
pub mod tpe;

pub use driver::{Engine, HyperbandEngine, Search, Source, Step, TpeEngine};
pub use hyperband::{
    Asha, Bracket, Brackets, Job, Outcome, Rung, RungStatus, Scored, round_budget,
};
pub use proposer::{ModelProposer, Proposal};
pub use prune::{PruneRule, ladder_readings};
pub use shard::Shard;
pub use tpe::{KnobDomain, Tpe, TpeOptions};
