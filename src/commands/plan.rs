//! `tunectl plan`: what a launch would run, where, and at what cost.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::inputs::{Resolved, fork_id, ledger_url, load_inputs, resolve};
use super::{CliError, failed, print_json, schema};
use crate::fingerprint;
use crate::ledger::{Ledger, Scan};
use crate::plan::{ClassInfo, Plan, PlanHost, PlanOnce};
use crate::shell_quote::quote_word;
use crate::space;
use crate::spec::{CommandRenderer, Inventory, Study, Transport, TrialVars, Value};
use crate::transport::slurm::nodes as slurm_nodes;

use crate::fmt::duration as fmt_secs;

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The study file.
    pub study: std::path::PathBuf,
    /// Inventory file (default: this machine, one slot).
    #[arg(long, short)]
    pub inventory: Option<std::path::PathBuf>,
    /// Ledger URL or path (default: the study's `ledger`, the inventory's, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Spend nothing and write nothing (always the case for `plan`).
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: crate::commands::FormatArgs,
    /// Same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// How many configs to show with their rendered commands.
    #[arg(long, default_value_t = 5)]
    pub show: usize,
    /// Plan one shard of a grid: `i/n` (1-based), the baseline and the
    /// i-th of n contiguous slices of the grid's candidates.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    pub shard: Option<crate::search::Shard>,
}

#[derive(Serialize)]
struct PlanView {
    schema: &'static str,
    /// The id a launch records under (a fork's when `launch --fork` is
    /// needed or already recorded this spec).
    study: String,
    /// The study's `name`.
    name: String,
    spec_hash: String,
    dry_run: bool,
    ledger: String,
    strategy: crate::spec::Strategy,
    knobs: usize,
    /// Configs in the full grid (may exceed 2^53).
    grid_configs: u128,
    repeats: u32,
    warmup: u32,
    /// `measurement.max_repeats`: racing raises a config's runs at a cell
    /// up to it where a decision is close.
    max_repeats: u32,
    /// Racing's bound, per host class: every config of every cell raised
    /// to `max_repeats` runs (a bound: racing takes only close decisions,
    /// at most 3 configs a round).
    racing_trials_bound: u64,
    /// The final rounds' bound per host class: every cell, both sides, at
    /// `max(confirm_repeats, max_repeats)` runs.
    confirm_trials_bound: u64,
    cells: Vec<CellView>,
    /// The study's `fingerprint.class_key`, when it is not the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    class_key: Option<crate::fingerprint::ClassKey>,
    classes: Vec<ClassView>,
    hosts: Vec<HostView>,
    dag: BTreeMap<&'static str, u64>,
    total_trials: u64,
    ledger_trials_held: usize,
    ledger_trials_in_plan: Option<u64>,
    /// What the ledger holds of this spec.
    ledger_study: LedgerStudy,
    typical_run_seconds: Option<f64>,
    typical_run_source: String,
    first_configs: Vec<ConfigView>,
    notes: Vec<String>,
    /// An adaptive search's shape (hyperband brackets and rungs, TPE).
    #[serde(skip_serializing_if = "Option::is_none")]
    search: Option<crate::plan::SearchPlan>,
}

/// What the ledger holds of the study file's spec.
#[derive(Serialize)]
struct LedgerStudy {
    state: LedgerState,
    /// `changed`: what differs from the spec the ledger holds as the
    /// study's name.
    changes: Vec<String>,
    /// Judging settings changed since the launch (re-judged, nothing reruns).
    judging_changes: Vec<String>,
}

#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum LedgerState {
    /// Nothing of this spec yet.
    New,
    /// Launched as the study's name.
    Launched,
    /// Launched as a fork of it.
    Fork,
    /// The name holds another spec: a launch refuses, `launch --fork`
    /// starts the plan's `study`.
    Changed,
}

#[derive(Serialize)]
struct CellView {
    cell: String,
    configs: u64,
    pruned_by_constraints: u64,
    trials_per_class: u64,
}

#[derive(Serialize)]
struct ClassView {
    host_class: String,
    label: String,
    probed: bool,
    hosts: Vec<String>,
    slots: u32,
    trials: u64,
    cost: crate::plan::Cost,
}

#[derive(Serialize)]
struct HostView {
    host: String,
    transport: String,
    slots: u32,
    host_class: String,
    trials_share: u64,
    /// A mixed Slurm partition's part: its nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    nodes: Vec<String>,
}

#[derive(Serialize)]
struct ConfigView {
    index: usize,
    label: String,
    config: serde_json::Value,
    cell: String,
    /// As it runs: a reference to a variable at every `{{ }}`.
    command: String,
    /// The variables the command refers to, with their values.
    command_env: serde_json::Map<String, serde_json::Value>,
    /// The same, in the order the command first refers to them.
    #[serde(skip)]
    refs: Vec<(String, String)>,
}

/// The hosts a plan shows, with the nodes of a mixed Slurm partition's
/// parts (host name → nodes).
async fn plan_hosts(
    inv: &Inventory,
    study: &Study,
    study_id: &str,
    ledger: Option<&Ledger>,
) -> (Vec<PlanHost>, BTreeMap<String, Vec<String>>) {
    let known = match ledger {
        Some(l) => l.hosts(study_id).await.map(|(h, _)| h).unwrap_or_default(),
        None => Vec::new(),
    };
    let mut local_fp: Option<Option<fingerprint::Fingerprint>> = None;
    let mut out = Vec::new();
    let mut nodes = BTreeMap::new();
    for h in &inv.hosts {
        if let Transport::Slurm(cfg) = &h.transport {
            let recorded = slurm_parts(&known, &h.name);
            // The partition's node types: the parts of an entry not
            // launched yet, and what each part's nodes run at once.
            let types = if recorded.is_some() || cfg.constraint.is_none() {
                node_types(h, inv).await
            } else {
                Vec::new()
            };
            let parts = match recorded {
                Some(p) => p,
                None if types.len() > 1 => unprobed_parts(&h.name, &types),
                None => Vec::new(),
            };
            if !parts.is_empty() {
                let capacity: Vec<u64> = parts
                    .iter()
                    .map(|p| slurm_nodes::task_capacity(&types, &p.1, cfg.gres.as_deref()))
                    .collect();
                let shares = slurm_nodes::shares(h.concurrency(), &capacity);
                for ((name, part_nodes, class), share) in parts.into_iter().zip(shares) {
                    out.push(PlanHost {
                        name: name.clone(),
                        transport: h.transport.name().to_string(),
                        slots: share,
                        class,
                    });
                    nodes.insert(name, part_nodes);
                }
                continue;
            }
        }
        let class = match h.transport {
            Transport::Local => {
                if local_fp.is_none() {
                    local_fp = Some(fingerprint::probe_local(&study.tools).await.ok());
                }
                local_fp.clone().flatten().map(|fp| ClassInfo {
                    id: fp.host_class_under(&study.class_key),
                    label: fp.class_label_under(&study.class_key),
                })
            }
            _ => known
                .iter()
                .rev()
                .find(|r| r.host == h.name)
                .map(|r| ClassInfo {
                    id: r.host_class.clone(),
                    label: r.class_label.clone(),
                }),
        };
        out.push(PlanHost {
            name: h.name.clone(),
            transport: h.transport.name().to_string(),
            slots: h.concurrency(),
            class,
        });
    }
    (out, nodes)
}

type PartView = (String, Vec<String>, Option<ClassInfo>);

/// The parts (`<entry>.<tag>`: name, nodes, class) of a mixed Slurm
/// partition as its last launch recorded them; `None` when that launch
/// found one class (or none was recorded).
fn slurm_parts(known: &[crate::ledger::records::HostRecord], entry: &str) -> Option<Vec<PartView>> {
    let prefix = format!("{entry}.");
    let whole = known
        .iter()
        .filter(|r| r.host == entry)
        .map(|r| r.probed_at.as_str())
        .max();
    let mut parts: BTreeMap<&str, &crate::ledger::records::HostRecord> = BTreeMap::new();
    for r in known.iter().filter(|r| r.host.starts_with(&prefix)) {
        if whole.is_some_and(|w| r.probed_at.as_str() < w) {
            continue;
        }
        match parts.get(r.host.as_str()) {
            Some(had) if had.probed_at >= r.probed_at => {}
            _ => {
                parts.insert(r.host.as_str(), r);
            }
        }
    }
    if parts.is_empty() {
        return None;
    }
    // In the order of their first node, as the launch found them.
    let mut parts: Vec<&crate::ledger::records::HostRecord> = parts.into_values().collect();
    parts.sort_by(|a, b| a.nodes.first().cmp(&b.nodes.first()));
    Some(
        parts
            .into_iter()
            .map(|r| {
                (
                    r.host.clone(),
                    r.nodes.clone(),
                    Some(ClassInfo {
                        id: r.host_class.clone(),
                        label: r.class_label.clone(),
                    }),
                )
            })
            .collect(),
    )
}

/// The node types of a Slurm entry's partition, as `sinfo` lists them;
/// none when it cannot be asked within 20 s.
async fn node_types(h: &crate::spec::Host, inv: &Inventory) -> Vec<slurm_nodes::NodeType> {
    let Ok(control_dir) = super::hosts::ssh_control_dir() else {
        return Vec::new();
    };
    let Ok(transport) = super::hosts::slurm_transport(h, inv, &control_dir, false) else {
        return Vec::new();
    };
    match tokio::time::timeout(Duration::from_secs(20), transport.node_types()).await {
        Ok(Ok(t)) => t,
        _ => Vec::new(),
    }
}

/// A Slurm entry not launched yet: one unprobed part per node type of its
/// partition (of several types).
fn unprobed_parts(entry: &str, types: &[slurm_nodes::NodeType]) -> Vec<PartView> {
    let mut out: Vec<PartView> = Vec::new();
    for t in types {
        let mut name = format!("{entry}.{}", t.tag());
        if out.iter().any(|p| p.0 == name) {
            name = format!("{name}-{}", t.nodes.first().cloned().unwrap_or_default());
        }
        out.push((name, t.nodes.clone(), None));
    }
    out
}

/// What a launch of a study on an inventory would run, and what the
/// ledger already holds of it.
pub struct Outlook {
    pub hosts: Vec<PlanHost>,
    /// The nodes of a mixed Slurm partition's parts, by host name.
    pub nodes: BTreeMap<String, Vec<String>>,
    pub plan: Plan,
    /// Trial keys of the study with any attempt.
    pub held: BTreeMap<String, usize>,
    /// How many of the plan's sweep trials (on probed classes) are held.
    pub in_plan: Option<u64>,
    /// Run times in the ledger, scaled to the objective's budget.
    pub timings: Vec<f64>,
    pub typical: Option<f64>,
    /// The ledger's attempts of the study, as read for this outlook.
    pub scan: Option<Arc<Scan>>,
}

/// Plan `study` on `inv` as study `study_id` (see [`Outlook`]), from
/// `plans` (listed now unless it was). The local machine is probed
/// (read-only); other hosts take their last fingerprint in the ledger.
pub async fn outlook(
    study: &Study,
    inv: &Inventory,
    study_id: &str,
    ledger: Option<&Ledger>,
    plans: &PlanOnce,
) -> Result<Outlook, CliError> {
    let (hosts, nodes) = plan_hosts(inv, study, study_id, ledger).await;
    let plan = plans.on(study, &hosts).map_err(CliError::Invalid)?;
    plan.check_acyclic().map_err(failed)?;
    let (held, scan) = match ledger {
        Some(l) => {
            let (scan, held) = l.scan_with_trial_keys(study_id).await.map_err(failed)?;
            (held, Some(scan))
        }
        None => (BTreeMap::new(), None),
    };
    let in_plan = (!held.is_empty()).then(|| count_in_plan(study, study_id, &plan, &held));
    let fixed = study.fidelity.as_ref().map_or(0.0, |f| f.fixed_cost);
    let timings: Vec<f64> = scan
        .as_ref()
        .map(|s| {
            s.attempts
                .iter()
                .filter_map(|a| {
                    let run = a
                        .run_s
                        .map(|r| r.max(a.duration_s / f64::from(a.warmup_runs + 1)))?;
                    // A run at a smaller budget, scaled to one at the full
                    // budget (run time taken as proportional to budget).
                    Some(match (a.fidelity, study.objective_budget()) {
                        (Some(b), Some(max)) if b + fixed > 0.0 => {
                            run * (max + fixed) / (b + fixed)
                        }
                        _ => run,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let typical = crate::stats::median(&timings);
    Ok(Outlook {
        hosts,
        nodes,
        plan,
        held,
        in_plan,
        timings,
        typical,
        scan,
    })
}

impl Outlook {
    /// The trial time (summed over slots, in seconds) a launch would
    /// still spend: expected, from the ledger's run times (`None` without
    /// any), and at most, every run at the trial timeout. What the ledger
    /// holds of the probed classes' plans is taken off in proportion.
    pub fn trial_seconds(&self, study: &Study) -> (Option<f64>, f64) {
        let per_class = self.plan.trials_per_class();
        let probed = self.plan.classes.iter().filter(|c| c.probed).count() as u64;
        let held = self.in_plan.unwrap_or(0);
        let left = |probed_class: bool| -> f64 {
            if !probed_class || per_class == 0 {
                return 1.0;
            }
            let all = (per_class * probed.max(1)) as f64;
            (1.0 - held as f64 / all).clamp(0.0, 1.0)
        };
        let typical = self.typical.map(Duration::from_secs_f64);
        let mut expected = Some(0.0);
        let mut worst = 0.0;
        for c in &self.plan.classes {
            let cost = self.plan.cost(c, study.trial.timeout, typical);
            let f = left(c.probed);
            worst += cost.worst_trial_seconds * f;
            expected = expected
                .zip(cost.expected_trial_seconds)
                .map(|(e, x)| e + x * f);
        }
        (expected, worst)
    }
}

/// Build the plan and print it, as text or JSON. Runs no trial and
/// writes nothing.
pub async fn run(a: PlanArgs) -> Result<(), CliError> {
    let (study, inv) = load_inputs(&a.study, a.inventory.as_deref())?;
    for d in &study.warnings {
        super::note!("warning: {d}");
    }
    let url = ledger_url(a.ledger.as_deref(), Some(&study), Some(&inv));
    let ledger = Ledger::open_existing(&url).map_err(failed)?;
    // The study a launch would record under (see `launch`).
    let resolved = match &ledger {
        Some(l) => resolve(l, &study).await?,
        None => Resolved::New,
    };
    let (study_id, ledger_study) = match resolved {
        Resolved::Launched { record, fork } => (
            record.study_id,
            LedgerStudy {
                state: if fork {
                    LedgerState::Fork
                } else {
                    LedgerState::Launched
                },
                changes: Vec::new(),
                judging_changes: record.spec.judging().changed_since_launch,
            },
        ),
        Resolved::New => (
            study.id().to_string(),
            LedgerStudy {
                state: LedgerState::New,
                changes: Vec::new(),
                judging_changes: Vec::new(),
            },
        ),
        Resolved::Changed { changes, .. } => (
            fork_id(&study),
            LedgerStudy {
                state: LedgerState::Changed,
                changes,
                judging_changes: Vec::new(),
            },
        ),
    };
    let Outlook {
        hosts,
        nodes,
        plan,
        held,
        in_plan,
        timings,
        typical,
        scan: _,
    } = outlook(
        &study,
        &inv,
        &study_id,
        ledger.as_ref(),
        &PlanOnce::new(a.shard),
    )
    .await?;

    let renderer = CommandRenderer::new(&study).map_err(CliError::Invalid)?;
    let mut first = Vec::new();
    let cell0 = &plan.cells[0];
    let listed: Vec<u64> = match &plan.search {
        Some(_) => first_search_configs(&study, &plan, a.show).map_err(CliError::Invalid)?,
        None => plan.per_cell[0].iter().copied().take(a.show).collect(),
    };
    // The budget the first listed configs run at.
    let first_budget = plan.search.as_ref().and_then(|s| {
        s.brackets
            .first()
            .and_then(|(_, r)| r.first().map(|x| x.0))
            .or(s.max_budget)
    });
    let configs = std::iter::once(plan.space.baseline()).chain(listed);
    for (i, config) in configs.take(a.show).enumerate() {
        let mut vars = TrialVars::default();
        let values = plan.space.values(&study, config);
        for (k, v) in study.knobs.iter().zip(&values) {
            vars.set(&k.name, v.clone());
        }
        for (axis, v) in study.cells.iter().zip(cell0) {
            vars.set(&axis.name, v.clone());
        }
        // The trial contract's variables, as a trial would get them.
        let mut env = space::value_env(&study, &values, cell0);
        for (name, value) in [
            ("study", Value::Str(study_id.clone())),
            ("study_dir", Value::Str(study.dir.display().to_string())),
            ("trial_id", Value::Str("<trial-key>".into())),
            ("trial_dir", Value::Str("<trial-dir>".into())),
            (
                "result",
                Value::Str("<trial-dir>/tunectl-result.json".into()),
            ),
            ("repeat", Value::Int(0)),
            (
                "budget",
                first_budget
                    .map(|b| {
                        if b.fract() == 0.0 {
                            Value::Int(b as i64)
                        } else {
                            Value::Float(b)
                        }
                    })
                    .unwrap_or(Value::Null),
            ),
            (
                "host",
                Value::Str(hosts.first().map(|h| h.name.clone()).unwrap_or_default()),
            ),
            ("slot", Value::Int(0)),
            ("phase", Value::Str("measure".into())),
        ] {
            let var = match name {
                "phase" => None,
                "study_dir" => Some("TUNECTL_STUDY_DIR".to_string()),
                other => Some(format!("TUNECTL_{}", other.to_uppercase())),
            };
            if let Some(var) = var {
                let text = match &value {
                    Value::Null => String::new(),
                    v => v.to_string(),
                };
                env.push((var, text));
            }
            vars.set(name, value);
        }
        let rendered = renderer.command(&vars, &env).map_err(CliError::Invalid)?;
        first.push(ConfigView {
            index: i,
            label: plan.space.label(&study, config),
            config: plan.space.config_json(&study, config),
            cell: space::cell_label(&study, cell0),
            command: rendered.command,
            command_env: rendered
                .vars
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str())))
                .collect(),
            refs: rendered.vars,
        });
    }

    let class_views: Vec<ClassView> = plan
        .classes
        .iter()
        .map(|c| ClassView {
            host_class: c.id.clone(),
            label: c.label.clone(),
            probed: c.probed,
            hosts: c.hosts.clone(),
            slots: c.slots,
            trials: plan.trials_per_class(),
            cost: plan.cost(c, study.trial.timeout, typical.map(Duration::from_secs_f64)),
        })
        .collect();
    let host_views: Vec<HostView> = hosts
        .iter()
        .map(|h| {
            let class = plan.classes.iter().find(|c| c.hosts.contains(&h.name));
            let share = class
                .map(|c| plan.trials_per_class() * u64::from(h.slots) / u64::from(c.slots.max(1)))
                .unwrap_or(0);
            HostView {
                host: h.name.clone(),
                transport: h.transport.clone(),
                slots: h.slots,
                host_class: class.map(|c| c.id.clone()).unwrap_or_default(),
                trials_share: share,
                nodes: nodes.get(&h.name).cloned().unwrap_or_default(),
            }
        })
        .collect();
    let view = PlanView {
        schema: schema::PLAN,
        study: study_id.clone(),
        name: study.id().to_string(),
        spec_hash: study.spec_hash(),
        dry_run: true,
        ledger: ledger
            .as_ref()
            .map(|l| l.url().to_string())
            .unwrap_or(url.clone()),
        strategy: study.strategy.clone(),
        class_key: (!study.class_key.is_default()).then(|| study.class_key.clone()),
        knobs: study.knobs.len(),
        grid_configs: study.grid_size(),
        repeats: plan.repeats,
        warmup: plan.warmup,
        max_repeats: study.measurement.max_repeats.max(plan.repeats),
        racing_trials_bound: (0..plan.cells.len())
            .map(|c| {
                plan.configs_in_cell(c)
                    * u64::from(study.measurement.max_repeats.saturating_sub(plan.repeats))
            })
            .sum(),
        confirm_trials_bound: if study.measurement.confirm_repeats == 0 {
            0
        } else {
            plan.cells.len() as u64
                * 2
                * u64::from(
                    study
                        .measurement
                        .max_repeats
                        .max(study.measurement.confirm_repeats),
                )
        },
        cells: (0..plan.cells.len())
            .map(|c| CellView {
                cell: space::cell_label(&study, &plan.cells[c]),
                configs: plan.configs_in_cell(c),
                pruned_by_constraints: plan.pruned[c],
                trials_per_class: plan.trials_in_cell(c),
            })
            .collect(),
        classes: class_views,
        hosts: host_views,
        dag: plan.node_counts(),
        total_trials: plan.total_trials(),
        ledger_trials_held: held.len(),
        ledger_trials_in_plan: in_plan,
        ledger_study,
        typical_run_seconds: typical,
        typical_run_source: if typical.is_some() {
            format!("median of {} run times in the ledger", timings.len())
        } else {
            "no timings in the ledger yet: only the timeout bound is known".to_string()
        },
        first_configs: first,
        notes: plan.notes.clone(),
        search: plan.search.clone(),
    };
    if a.output.json(a.json) {
        print_json(&view)?;
    } else {
        crate::term::out(&crate::term::escape_block(&render_plan(&view)));
    }
    Ok(())
}

/// The first configs an adaptive search tries at the first cell, in order:
/// hyperband's seeded draw order, TPE's first suggestions (before any
/// result). A launch hands them out in this order (`--seed-from` aside)
/// until results come in; then TPE, and hyperband with `proposer: tpe`,
/// propose from them.
fn first_search_configs(study: &Study, plan: &Plan, n: usize) -> Result<Vec<u64>, String> {
    let accept = space::search_filter(study, &plan.space, &plan.cells[0], HashSet::new())?;
    match study.strategy {
        crate::spec::Strategy::Hyperband { seed, .. } => {
            Ok(crate::search::Source::new(plan.space.size(), seed, accept)
                .take(n)
                .collect())
        }
        crate::spec::Strategy::Tpe { seed, .. } => {
            let better = study
                .fidelity
                .as_ref()
                .map(|f| f.proxy.better)
                .unwrap_or(study.objective.better);
            let mut tpe = crate::search::Tpe::for_study(study, better, seed)?;
            let mut pending = std::collections::HashSet::new();
            let mut out = Vec::new();
            let mut refused = 0;
            while out.len() < n && refused < 10_000 {
                let Some(c) = tpe.suggest(&pending) else {
                    break;
                };
                if accept(c) {
                    pending.insert(c);
                    out.push(c);
                } else {
                    refused += 1;
                    tpe.exclude(c)?;
                }
            }
            Ok(out)
        }
        _ => Ok(Vec::new()),
    }
}

/// How many of the plan's sweep trials on its probed classes the ledger
/// already holds (`held`: trial keys with any attempt).
fn count_in_plan(
    study: &Study,
    study_id: &str,
    plan: &Plan,
    held: &BTreeMap<String, usize>,
) -> u64 {
    plan.classes
        .iter()
        .filter(|c| c.probed)
        .flat_map(|c| plan.sweep_trials(study, study_id, &c.id))
        .filter(|t| held.contains_key(&t.key))
        .count() as u64
}

fn render_plan(v: &PlanView) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "plan for study {} (spec {}) · dry run: nothing runs, nothing is written",
        v.study,
        &v.spec_hash[..12]
    );
    let strategy = match &v.strategy {
        crate::spec::Strategy::Grid => "grid".to_string(),
        crate::spec::Strategy::Random { seed, count } => {
            format!("random (seed {seed}, {count} configs)")
        }
        crate::spec::Strategy::Hyperband {
            seed,
            finalists,
            proposer,
            ..
        } => match proposer {
            crate::spec::Proposer::Random => {
                format!("hyperband (seed {seed}, top {finalists} promoted to the objective)")
            }
            crate::spec::Proposer::Tpe => format!(
                "hyperband (seed {seed}, new configs proposed by tpe, top {finalists} promoted to the objective)"
            ),
        },
        crate::spec::Strategy::Tpe {
            seed,
            count,
            finalists,
            ..
        } => format!(
            "tpe (seed {seed}, {count} configs suggested, top {finalists} promoted to the objective)"
        ),
    };
    let _ = writeln!(
        o,
        "space: {} knobs, {} configs in the grid, strategy {strategy}; {} repeats per config, {} warm-up runs",
        v.knobs, v.grid_configs, v.repeats, v.warmup
    );
    if v.racing_trials_bound > 0 || v.confirm_trials_bound > 0 {
        let _ = writeln!(
            o,
            "racing and final rounds: where a decision is close, configs get more runs up to measurement.max_repeats = {} (at most {} more trials per host class, a bound rarely reached); each bucket's final round takes {} runs a side per cell, sized from the sweep's estimate (at most {} trials per host class)",
            v.max_repeats,
            v.racing_trials_bound,
            if v.confirm_trials_bound > 0 {
                "confirm_repeats to max_repeats"
            } else {
                "no"
            },
            v.confirm_trials_bound
        );
    }
    let dag: Vec<String> = v.dag.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = writeln!(o, "DAG: {} nodes (acyclic)", dag.join(", "));
    let held = match v.ledger_trials_in_plan {
        Some(n) => format!(
            "{} trials held, {n} of them in this plan (they will not run again)",
            v.ledger_trials_held
        ),
        None => "no trials of this study yet".to_string(),
    };
    let _ = writeln!(o, "ledger: {} · {held}", v.ledger);
    let ls = &v.ledger_study;
    match ls.state {
        LedgerState::Changed => {
            let _ = writeln!(
                o,
                "  study `{}` there was launched with another spec (changed: {}): `launch` refuses this file; `launch --fork` records it as study `{}` and runs every trial of this plan",
                v.name,
                ls.changes.join("; "),
                v.study
            );
        }
        LedgerState::Fork => {
            let _ = writeln!(
                o,
                "  this spec is the fork `{}` there: `launch` continues it",
                v.study
            );
        }
        LedgerState::New | LedgerState::Launched => {}
    }
    if !ls.judging_changes.is_empty() {
        let _ = writeln!(
            o,
            "  judging settings changed since the launch ({}): the recorded measurements are judged again, nothing reruns for it",
            ls.judging_changes.join("; ")
        );
    }
    if let Some(sp) = &v.search {
        render_search_plan(&mut o, sp, v.repeats);
    }
    let _ = writeln!(o, "\ncells (per host class):");
    let _ = writeln!(
        o,
        "  {:<32} {:>10} {:>10} {:>10}",
        "cell", "configs", "pruned", "trials"
    );
    for c in &v.cells {
        let _ = writeln!(
            o,
            "  {:<32} {:>10} {:>10} {:>10}",
            c.cell, c.configs, c.pruned_by_constraints, c.trials_per_class
        );
    }
    match &v.class_key {
        Some(key) => {
            let _ = writeln!(o, "\nhost classes (class key: {}):", key.describe());
        }
        None => {
            let _ = writeln!(o, "\nhost classes:");
        }
    }
    for c in &v.classes {
        let _ = writeln!(
            o,
            "  {} · {} · hosts: {} · {} slots",
            c.host_class,
            c.label,
            c.hosts.join(", "),
            c.slots
        );
        let expected = match (c.cost.expected_trial_seconds, c.cost.expected_wall_seconds) {
            (Some(t), Some(w)) => format!(
                "expected ~{} of trial time (~{} wall)",
                fmt_secs(t),
                fmt_secs(w)
            ),
            _ => "expected cost unknown until the ledger has timings".to_string(),
        };
        let _ = writeln!(
            o,
            "    {} trials, {} runs with warm-ups · at most {} of trial time if every run hits its timeout ({} wall) · {expected}",
            c.trials,
            c.cost.runs,
            fmt_secs(c.cost.worst_trial_seconds),
            fmt_secs(c.cost.worst_wall_seconds),
        );
    }
    let _ = writeln!(o, "  ({})", v.typical_run_source);
    let _ = writeln!(o, "\nhosts:");
    for h in &v.hosts {
        let nodes = if h.nodes.is_empty() {
            String::new()
        } else {
            format!(" · nodes {}", h.nodes.join(", "))
        };
        let _ = writeln!(
            o,
            "  {:<20} {:<6} {} slots · ~{} trials{nodes}",
            h.host, h.transport, h.slots, h.trials_share,
        );
    }
    let _ = writeln!(
        o,
        "\nfirst configs (cell {}):",
        v.first_configs
            .first()
            .map(|c| c.cell.as_str())
            .unwrap_or("")
    );
    // Each command as it runs, then the values of the variables it refers
    // to; a command like the first one's only with the values that differ.
    let first = v.first_configs.first();
    for c in &v.first_configs {
        let _ = writeln!(o, "  #{} {}", c.index, c.label);
        let assign = |refs: &[&(String, String)]| -> String {
            refs.iter()
                .map(|(k, val)| format!("{k}={}", quote_word(val)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        match first.filter(|f| f.index != c.index && f.command == c.command) {
            Some(f) => {
                let changed: Vec<&(String, String)> =
                    c.refs.iter().filter(|r| !f.refs.contains(r)).collect();
                if changed.is_empty() {
                    let _ = writeln!(o, "      $ (as #{})", f.index);
                } else {
                    let _ = writeln!(o, "      $ (as #{}) with {}", f.index, assign(&changed));
                }
            }
            None => {
                let _ = writeln!(o, "      $ {}", c.command);
                if !c.refs.is_empty() {
                    let all: Vec<&(String, String)> = c.refs.iter().collect();
                    let _ = writeln!(o, "        with {}", assign(&all));
                }
            }
        }
    }
    let _ = writeln!(
        o,
        "\ntotal: {}",
        crate::fmt::count(v.total_trials, "trial", "trials")
    );
    for n in &v.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

fn render_search_plan(o: &mut String, sp: &crate::plan::SearchPlan, repeats: u32) {
    use std::fmt::Write as _;
    let unit = if sp.budget_unit.is_empty() {
        String::new()
    } else {
        format!(" {}", sp.budget_unit)
    };
    let fmt_b = crate::report::render::budget;
    let _ = writeln!(
        o,
        "\nadaptive search: {} (seed {}), per host class and cell; decided on a virtual clock of {} where a run takes its budget plus fidelity.fixed_cost (the same decisions whatever order results arrive in)",
        sp.strategy,
        sp.seed,
        sp.parallel
            .map(|p| format!("{p} workers"))
            .unwrap_or_else(|| "as many workers as the class has slots at launch".to_string())
    );
    if !sp.brackets.is_empty() {
        let _ = writeln!(
            o,
            "  brackets (configs @ budget{unit} per rung; the best 1/eta of a rung go on; ASHA promotes as results arrive, at most the next rung's count early){}:",
            if sp.iterations > 1 {
                format!(
                    ", run {} times over different configs (iterations)",
                    sp.iterations
                )
            } else {
                String::new()
            }
        );
        for (s, rungs) in &sp.brackets {
            let chain: Vec<String> = rungs
                .iter()
                .map(|(b, n, keep)| format!("{n} @ {} (keep {keep})", fmt_b(*b)))
                .collect();
            let _ = writeln!(o, "    s={s}: {}", chain.join(" → "));
        }
    }
    let base: Vec<String> = sp.baseline_budgets.iter().map(|b| fmt_b(*b)).collect();
    if !base.is_empty() {
        let _ = writeln!(
            o,
            "  baseline at {}{unit} (the gate's reference output at each budget)",
            base.join(", ")
        );
    }
    let _ = writeln!(
        o,
        "  screening: {} runs spending {}{unit} (at most {} runs, {}{unit}, if early promotions misfire)",
        sp.rung_trials,
        fmt_b(sp.search_budget),
        sp.rung_trials_bound,
        fmt_b(sp.search_budget_bound)
    );
    let at = sp
        .max_budget
        .map(|m| format!(" at {}{unit}", fmt_b(m)))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "  objective stage: top {} finalists + baseline × {repeats} repeats = {} trials{at}, then anchors and confirmation as in a grid",
        sp.finalists, sp.objective_trials
    );
    let _ = writeln!(
        o,
        "  expected trial-seconds: {:.1}% of a full grid's ({} candidates + baseline × {repeats} repeats = {} trials{at}; a run's time taken as its budget{})",
        sp.share_of_grid * 100.0,
        sp.grid_candidates,
        sp.grid_trials,
        if sp.fixed_cost > 0.0 {
            format!(" plus fidelity.fixed_cost {}{unit}", fmt_b(sp.fixed_cost))
        } else {
            " (fidelity.fixed_cost 0)".to_string()
        }
    );
    if sp.continuation {
        let _ = writeln!(
            o,
            "  continuation: a promoted rung continues its config's previous rung from a checkpoint kept on its host and in the ledger; the virtual clock charges it only the budget it adds, the counts and costs above every rung in full"
        );
    }
    if sp.prune && sp.read_at.is_empty() {
        let _ = writeln!(
            o,
            "  pruning: a rung whose progress ranks where ASHA would not promote it is stopped and recorded as pruned"
        );
    } else if sp.prune {
        let at: Vec<String> = sp.read_at.iter().map(|b| fmt_b(*b)).collect();
        let _ = writeln!(
            o,
            "  pruning: a run's progress is read at {}{unit}; one that ranks where successive halving would not keep it there (against the readings there of the runs the search had seen when it started; while those are fewer than eta - 1, below their best) is stopped and recorded as pruned. Runs are checked from the first, second, ... of those budgets, or never, in Hyperband's shares. The counts and costs above take every run in full",
            at.join(", ")
        );
    }
}
