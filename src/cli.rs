//! Command-line interface. Data goes to stdout (tables, JSON); progress,
//! warnings and errors go to stderr.
//!
//! Exit codes: 0 success (rejected trials are results, not errors);
//! 1 the study could not run (ledger, host or internal error);
//! 2 invalid input (study, inventory or arguments); 130 interrupted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::exec::events::LaunchSummary;
use crate::exec::local::LocalTransport;
use crate::exec::progress::{self, ProgressMode};
use crate::exec::run_study::{self as launch, LaunchHost};
use crate::exec::ssh::SshTransport;
use crate::fingerprint;
use crate::ledger::{DEFAULT_LEDGER, Ledger};
use crate::plan::{ClassInfo, Plan, PlanHost};
use crate::report::{self, Format};
use crate::space::{self, ConfigSpace};
use crate::spec::{CommandRenderer, Diagnostics, Inventory, Study, Transport, TrialVars, Value};
use crate::trial::TrialIdentity;
use crate::{tuned, yaml_out};

/// A line for people on stdout: control characters in it (from a study, a
/// host, a trial) are shown escaped ([`crate::term`]). JSON goes out with
/// `println!` and its own escaping.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", crate::term::escape_block(&format!($($arg)*)))
    };
}

/// [`say!`] on stderr.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", crate::term::escape_block(&format!($($arg)*)))
    };
}

#[derive(Parser, Debug)]
#[command(
    name = "tunectl",
    version,
    about = "Find the fastest knob settings per class of machine that neither crash nor change output"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show what a launch would run, where, and at what cost. Spends nothing.
    Plan(PlanArgs),
    /// Run a study's trials and record every attempt in the ledger.
    Launch(LaunchArgs),
    /// Per host class and cell: baseline, winner, rejected configs.
    Report(ReportArgs),
    /// Write one tuned file per host class: the knobs that ship per bucket.
    Export(ExportArgs),
    /// Run a command with the tuned knobs of this host's class (else the defaults).
    Apply(ApplyArgs),
    /// Per host class: trials done, failed, lost, running and pending.
    Status(StatusArgs),
    /// Inspect the ledger itself.
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Probe this machine and print its fingerprint and host class.
    Fingerprint(FingerprintArgs),
    /// Validate study and inventory files.
    Validate(ValidateArgs),
}

#[derive(clap::Args, Debug)]
struct PlanArgs {
    /// The study file.
    study: PathBuf,
    /// Inventory file (default: this machine, one slot).
    #[arg(long, short)]
    inventory: Option<PathBuf>,
    /// Ledger URL or path (default: the study's `ledger`, the inventory's, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    ledger: Option<String>,
    /// Spend nothing and write nothing (always the case for `plan`).
    #[arg(long)]
    dry_run: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// How many configs to show with their rendered commands.
    #[arg(long, default_value_t = 5)]
    show: usize,
    /// Plan one shard of a grid: `i/n` (1-based), the baseline and the
    /// i-th of n contiguous slices of the grid's candidates.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    shard: Option<crate::search::Shard>,
}

#[derive(clap::Args, Debug)]
struct LaunchArgs {
    study: PathBuf,
    #[arg(long, short)]
    inventory: Option<PathBuf>,
    #[arg(long, env = "TUNECTL_LEDGER")]
    ledger: Option<String>,
    /// Only use these inventory hosts (repeatable).
    #[arg(long = "host")]
    hosts: Vec<String>,
    /// Where attempts get their fresh directories.
    #[arg(long, env = "TUNECTL_WORKDIR")]
    workdir: Option<PathBuf>,
    /// Keep the directories of successful attempts too (failed ones are always kept).
    #[arg(long)]
    keep_workdirs: bool,
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
    /// Start a new study (id `<name>-<spec hash>`) when the spec differs from the ledger's.
    #[arg(long)]
    fork: bool,
    /// Report drift of the baseline anchors but discard nothing and never cool down.
    #[arg(long)]
    no_cooldown: bool,
    /// Store every attempt's full stdout and stderr in the ledger beside it
    /// (`<attempt>.stdout.log`, `<attempt>.stderr.log`; 64 MiB each at most).
    #[arg(long)]
    store_logs: bool,
    /// How long the trials of a host class wait when every host of the
    /// class is down, before they are left for a later launch (e.g. `10m`).
    #[arg(long, value_parser = crate::spec::yaml::parse_duration, default_value = "10m")]
    host_timeout: std::time::Duration,
    /// Run one shard of a grid: `i/n` (1-based): the baseline and the i-th
    /// of n contiguous slices of the grid's candidates, no confirmation
    /// round. Shards may share a ledger or each have one.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    shard: Option<crate::search::Shard>,
    /// Warm-start an adaptive search from an earlier study of the same
    /// knobs: `<ledger URL or path>#<study id>`, or a study id in this
    /// launch's ledger. Configs that failed there on a host class are not
    /// tried again on it; TPE starts from its values.
    #[arg(long)]
    seed_from: Option<String>,
}

#[derive(clap::Args, Debug)]
struct ReportArgs {
    /// A study file, or a study id in the ledger.
    study: String,
    #[arg(long, env = "TUNECTL_LEDGER")]
    ledger: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Show every eligible config, not only the baseline, the best and the rejected.
    #[arg(long)]
    all: bool,
    /// Only the configs of one shard of a grid (`i/n`, as given to launch);
    /// needs the study file. With `--format measurements`, the rows of
    /// shards 1/n .. n/n concatenated equal those of the full grid.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    shard: Option<crate::search::Shard>,
}

#[derive(clap::Args, Debug)]
struct ExportArgs {
    /// A study file, or a study id in the ledger.
    study: String,
    #[arg(long, env = "TUNECTL_LEDGER")]
    ledger: Option<String>,
    /// Directory for the tuned files (created if missing).
    #[arg(long, default_value = "tuned")]
    out: PathBuf,
}

#[derive(clap::Args, Debug)]
struct ApplyArgs {
    /// A tuned file, or a directory of them (every *.yaml in it).
    #[arg(long)]
    tuned: PathBuf,
    /// The workload cell, one axis per flag (e.g. `--cell batch=4`): picks the bucket.
    #[arg(long = "cell", value_name = "AXIS=VALUE")]
    cells: Vec<String>,
    /// Print the chosen knobs, the environment and why, as YAML; run nothing.
    #[arg(long)]
    print: bool,
    /// The command, after `--`: a template (`{{ knob }}` is replaced by the
    /// knob's value, shell-quoted) run with `/bin/sh -c`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct StatusArgs {
    /// A study file (pending counts need it), or a study id in the ledger.
    study: String,
    #[arg(long, env = "TUNECTL_LEDGER")]
    ledger: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum LedgerCommand {
    /// List objects that cannot be read as what their key says (they are
    /// ignored and their trials run again). Exits 1 when there are any.
    Check(LedgerCheckArgs),
}

#[derive(clap::Args, Debug)]
struct LedgerCheckArgs {
    /// A study file or id; every study in the ledger when omitted.
    study: Option<String>,
    #[arg(long, env = "TUNECTL_LEDGER")]
    ledger: Option<String>,
}

#[derive(clap::Args, Debug)]
struct FingerprintArgs {
    /// Also probe the tool versions this study asks for.
    #[arg(long)]
    study: Option<PathBuf>,
    /// Print JSON instead of YAML.
    #[arg(long)]
    json: bool,
    /// Probe every host of this inventory (local, ssh) instead of this
    /// machine, and group them into host classes.
    #[arg(long, short)]
    inventory: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct ValidateArgs {
    /// Study or inventory files (an inventory has a `hosts` key).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// What went wrong, mapped to an exit code.
#[derive(Debug)]
pub enum CliError {
    Invalid(String),
    Failed(String),
    Interrupted,
    /// The launch finished with buckets that are not verdicts (exit 3).
    Drafts(String),
}

impl From<Diagnostics> for CliError {
    fn from(d: Diagnostics) -> Self {
        CliError::Invalid(d.to_string())
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TUNECTL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            say_err!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Invalid(m)) => {
            say_err!("error: {m}");
            ExitCode::from(2)
        }
        Err(CliError::Failed(m)) => {
            say_err!("error: {m}");
            ExitCode::from(1)
        }
        Err(CliError::Interrupted) => ExitCode::from(130),
        Err(CliError::Drafts(m)) => {
            say_err!("note: {m}");
            ExitCode::from(3)
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Plan(a) => plan(a).await,
        Command::Launch(a) => launch(a).await,
        Command::Report(a) => report_cmd(a).await,
        Command::Export(a) => export_cmd(a).await,
        Command::Apply(a) => apply_cmd(a).await,
        Command::Status(a) => status_cmd(a).await,
        Command::Ledger(LedgerCommand::Check(a)) => ledger_check(a).await,
        Command::Fingerprint(a) => fingerprint_cmd(a).await,
        Command::Validate(a) => validate(a),
    }
}

fn load_inputs(study: &Path, inventory: Option<&Path>) -> Result<(Study, Inventory), CliError> {
    let s = Study::load(study);
    let i = match inventory {
        Some(p) => Inventory::load(p),
        None => Ok(Inventory::local_default()),
    };
    match (s, i) {
        (Ok(s), Ok(i)) => Ok((s, i)),
        (Err(mut a), Err(b)) => {
            a.extend(b);
            Err(a.into())
        }
        (Err(a), _) | (_, Err(a)) => Err(a.into()),
    }
}

fn ledger_url(flag: Option<&str>, study: Option<&Study>, inv: Option<&Inventory>) -> String {
    flag.map(str::to_string)
        .or_else(|| study.and_then(|s| s.ledger.clone()))
        .or_else(|| inv.and_then(|i| i.ledger.clone()))
        .unwrap_or_else(|| DEFAULT_LEDGER.to_string())
}

fn failed(e: impl std::fmt::Display) -> CliError {
    CliError::Failed(e.to_string())
}

fn fmt_secs(s: f64) -> String {
    humantime::format_duration(Duration::from_secs(s.round() as u64)).to_string()
}

#[derive(Serialize)]
struct PlanView {
    study: String,
    spec_hash: String,
    dry_run: bool,
    ledger: String,
    strategy: crate::spec::Strategy,
    knobs: usize,
    grid_configs: String,
    repeats: u32,
    warmup: u32,
    cells: Vec<CellView>,
    classes: Vec<ClassView>,
    hosts: Vec<HostView>,
    dag: BTreeMap<&'static str, u64>,
    total_trials: u64,
    ledger_trials_held: usize,
    ledger_trials_in_plan: Option<u64>,
    typical_run_seconds: Option<f64>,
    typical_run_source: String,
    first_configs: Vec<ConfigView>,
    notes: Vec<String>,
    /// An adaptive search's shape (hyperband brackets and rungs, TPE).
    #[serde(skip_serializing_if = "Option::is_none")]
    search: Option<crate::plan::SearchPlan>,
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
}

#[derive(Serialize)]
struct ConfigView {
    index: usize,
    label: String,
    config: serde_json::Value,
    cell: String,
    command: String,
}

async fn plan_hosts(inv: &Inventory, study: &Study, ledger: Option<&Ledger>) -> Vec<PlanHost> {
    let known = match ledger {
        Some(l) => l
            .hosts(study.id())
            .await
            .map(|(h, _)| h)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let mut local_fp: Option<Option<fingerprint::Fingerprint>> = None;
    let mut out = Vec::new();
    for h in &inv.hosts {
        let class = match h.transport {
            Transport::Local => {
                if local_fp.is_none() {
                    local_fp = Some(fingerprint::probe_local(&study.tools).await.ok());
                }
                local_fp.clone().flatten().map(|fp| ClassInfo {
                    id: fp.host_class(),
                    label: fp.class_label(),
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
    out
}

async fn plan(a: PlanArgs) -> Result<(), CliError> {
    let (study, inv) = load_inputs(&a.study, a.inventory.as_deref())?;
    let url = ledger_url(a.ledger.as_deref(), Some(&study), Some(&inv));
    let ledger = Ledger::open_existing(&url).map_err(failed)?;
    let hosts = plan_hosts(&inv, &study, ledger.as_ref()).await;
    let plan = Plan::build_shard(&study, &hosts, a.shard).map_err(CliError::Invalid)?;
    plan.check_acyclic().map_err(failed)?;

    // What the ledger already holds.
    let (held, scan) = match &ledger {
        Some(l) => (
            l.trial_keys(study.id()).await.map_err(failed)?,
            Some(l.scan(study.id()).await.map_err(failed)?),
        ),
        None => (BTreeMap::new(), None),
    };
    let in_plan = (!held.is_empty()).then(|| count_in_plan(&study, &plan, &held));
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
                    let fixed = study.fidelity.as_ref().map_or(0.0, |f| f.fixed_cost);
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
        for (k, v) in study.knobs.iter().zip(plan.space.values(&study, config)) {
            vars.set(&k.name, v);
        }
        for (axis, v) in study.cells.iter().zip(cell0) {
            vars.set(&axis.name, v.clone());
        }
        for (name, value) in [
            ("study", Value::Str(study.id().to_string())),
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
            vars.set(name, value);
        }
        let command = renderer.command(&vars).map_err(CliError::Invalid)?;
        first.push(ConfigView {
            index: i,
            label: plan.space.label(&study, config),
            config: plan.space.config_json(&study, config),
            cell: space::cell_label(&study, cell0),
            command,
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
            }
        })
        .collect();
    let view = PlanView {
        study: study.id().to_string(),
        spec_hash: study.spec_hash(),
        dry_run: true,
        ledger: ledger
            .as_ref()
            .map(|l| l.url().to_string())
            .unwrap_or(url.clone()),
        strategy: study.strategy.clone(),
        knobs: study.knobs.len(),
        grid_configs: study.grid_size().to_string(),
        repeats: plan.repeats,
        warmup: plan.warmup,
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
    if a.json {
        println!("{}", serde_json::to_string_pretty(&view).map_err(failed)?);
    } else {
        print!("{}", crate::term::escape_block(&render_plan(&view)));
    }
    Ok(())
}

/// The first configs an adaptive search tries at the first cell, in order:
/// hyperband's seeded draw order, TPE's first suggestions (before any
/// result). A launch hands them out in this order (`--seed-from` aside).
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

fn count_in_plan(study: &Study, plan: &Plan, held: &BTreeMap<String, usize>) -> u64 {
    let mut n = 0;
    for class in plan.classes.iter().filter(|c| c.probed) {
        for (ci, cell) in plan.cells.iter().enumerate() {
            let cell_json = space::cell_json(study, cell);
            let configs =
                std::iter::once(plan.space.baseline()).chain(plan.per_cell[ci].iter().copied());
            for config in configs {
                let config_json = plan.space.config_json(study, config);
                for repeat in 0..plan.repeats {
                    let key = TrialIdentity {
                        study: study.id(),
                        config: &config_json,
                        cell: &cell_json,
                        fidelity: study.objective_budget(),
                        repeat,
                        host_class: &class.id,
                        role: crate::trial::Role::Sweep,
                    }
                    .key();
                    if held.contains_key(&key) {
                        n += 1;
                    }
                }
            }
        }
    }
    n
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
            seed, finalists, ..
        } => format!("hyperband (seed {seed}, top {finalists} promoted to the objective)"),
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
    let _ = writeln!(o, "\nhost classes:");
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
        let _ = writeln!(
            o,
            "  {:<20} {:<6} {} slots · ~{} trials",
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
    for c in &v.first_configs {
        let _ = writeln!(o, "  #{} {}\n      $ {}", c.index, c.label, c.command);
    }
    let _ = writeln!(o, "\ntotal: {} trials", v.total_trials);
    for n in &v.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

/// `--seed-from`: `<ledger URL or path>#<study id>`, or a study id in the
/// launch's ledger.
async fn load_prior(
    from: &str,
    study: &Study,
    ledger: &Ledger,
) -> Result<crate::exec::prior::Prior, CliError> {
    if !study.strategy.is_adaptive() {
        return Err(CliError::Invalid(format!(
            "--seed-from warm-starts an adaptive search (strategy hyperband or tpe); this study's strategy is {}",
            study.strategy.name()
        )));
    }
    let other;
    let (source, id) = match from.rsplit_once('#') {
        Some((url, id)) if !url.is_empty() && !id.is_empty() => {
            other = Ledger::open_existing(url).map_err(failed)?.ok_or_else(|| {
                CliError::Invalid(format!("--seed-from {from}: no ledger at `{url}`"))
            })?;
            (&other, id.to_string())
        }
        _ if from.contains("://") || from.contains('/') => {
            let listed = match Ledger::open_existing(from).map_err(failed)? {
                Some(l) => l.studies().await.map_err(failed)?.join(", "),
                None => "no ledger there".to_string(),
            };
            return Err(CliError::Invalid(format!(
                "--seed-from {from}: name the study as `<ledger>#<study id>` (studies there: {listed})"
            )));
        }
        _ => (ledger, from.to_string()),
    };
    let space = ConfigSpace::new(study).map_err(CliError::Invalid)?;
    let metric = study
        .fidelity
        .as_ref()
        .map(|f| f.proxy.name.clone())
        .unwrap_or_else(|| study.objective.name.clone());
    let budget = study
        .fidelity
        .as_ref()
        .map(|f| f.trial_budget(f.max_budget));
    let prior = crate::exec::prior::Prior::load(source, &id, study, &space, &metric, budget)
        .await
        .map_err(|e| CliError::Invalid(format!("--seed-from {from}: {e}")))?;
    say_err!(
        "seeding from {}: what it knows about {} host class(es) of these knobs",
        prior.source,
        prior.classes()
    );
    Ok(prior)
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
}

async fn launch(a: LaunchArgs) -> Result<(), CliError> {
    let (study, inv) = load_inputs(&a.study, a.inventory.as_deref())?;
    for name in &a.hosts {
        if inv.host(name).is_none() {
            let known: Vec<&str> = inv.hosts.iter().map(|h| h.name.as_str()).collect();
            return Err(CliError::Invalid(format!(
                "--host {name}: no such host in the inventory (hosts: {})",
                known.join(", ")
            )));
        }
    }
    let selected: Vec<&crate::spec::Host> = inv
        .hosts
        .iter()
        .filter(|h| a.hosts.is_empty() || a.hosts.contains(&h.name))
        .collect();
    let url = ledger_url(a.ledger.as_deref(), Some(&study), Some(&inv));
    let ledger = Ledger::open(&url).map_err(failed)?;
    // An unreachable or unreadable store stops the launch before any trial.
    ledger.check_reachable().await.map_err(failed)?;
    let mut study_id = study.id().to_string();
    if a.fork
        && let Some(existing) = ledger.read_study(&study_id).await.map_err(failed)?
        && existing.spec_hash != study.spec_hash()
    {
        study_id = format!("{}-{}", study.id(), &study.spec_hash()[..12]);
        say_err!(
            "forking: this spec differs from the ledger's `{}`; recording it as study `{study_id}`",
            study.id()
        );
    }
    let prior = match &a.seed_from {
        Some(from) => Some(Arc::new(load_prior(from, &study, &ledger).await?)),
        None => None,
    };
    if let Some(sh) = a.shard {
        // Refused before anything runs (the plan says why).
        Plan::build_shard(&study, &[], Some(sh)).map_err(CliError::Invalid)?;
    }
    let work_root = a
        .workdir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("tunectl-work"));
    // Trials run inside their own directories: the root must be absolute.
    let work_root = std::path::absolute(&work_root).map_err(failed)?;
    let control_dir = ssh_control_dir().map_err(failed)?;
    let make_hosts = || -> Result<Vec<LaunchHost>, CliError> {
        selected
            .iter()
            .map(|h| {
                let transport =
                    transport_for(h, &inv, &work_root, &control_dir, a.keep_workdirs)?;
                if let Transport::Ssh(cfg) = &h.transport
                    && h.slots > cfg.max_sessions
                {
                    say_err!(
                        "warning: host `{}` has {} slots but max_sessions {}: at most {} of its trials run at once",
                        h.name, h.slots, cfg.max_sessions, cfg.max_sessions
                    );
                }
                Ok(LaunchHost {
                    name: h.name.clone(),
                    transport_name: h.transport.name().to_string(),
                    slots: h.concurrency(),
                    devices: h.devices.clone(),
                    device_env: h.device_env.clone(),
                    transport,
                })
            })
            .collect()
    };
    // Bad templates or login hosts stop the launch before anything runs.
    make_hosts()?;
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            say_err!("interrupted: stopping; running trials are killed and recorded as lost");
            on_signal.cancel();
        }
    });
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let reporter = tokio::spawn(progress::report(a.progress, rx));
    say_err!("launching study {study_id} · ledger {}", ledger.url());
    let options = launch::LaunchOptions {
        no_cooldown: a.no_cooldown,
        store_logs: a.store_logs,
        host_timeout: a.host_timeout,
        prior,
        shard: a.shard,
    };
    let mut summary = LaunchSummary::default();
    // A host whose fingerprint changed mid-launch is a new host class: the
    // launch goes round again (probing anew) so that class is tuned too.
    for round in 0..MAX_LAUNCH_ROUNDS {
        let result = launch::run_study(
            &study,
            &study_id,
            &ledger,
            make_hosts()?,
            options.clone(),
            tx.clone(),
            cancel.clone(),
        )
        .await;
        let this = match result {
            Ok(s) => s,
            Err(e) => {
                drop(tx);
                let _ = reporter.await;
                return Err(match e {
                    launch::LaunchError::SpecChanged { .. } => CliError::Invalid(e.to_string()),
                    other => failed(other),
                });
            }
        };
        let again =
            !this.changed_hosts.is_empty() && !this.interrupted && this.unrecorded.is_empty();
        summary.add(&this);
        if !again {
            break;
        }
        if round + 1 < MAX_LAUNCH_ROUNDS {
            say_err!(
                "hosts {} changed class mid-launch: probing again to tune their new class",
                this.changed_hosts.join(", ")
            );
        }
    }
    drop(tx);
    let _ = reporter.await;
    for (h, why) in &summary.unreachable_hosts {
        say_err!("warning: host {h}: {why} (skipped in this launch)");
    }
    for (c, left) in &summary.abandoned_classes {
        say_err!(
            "warning: class {c}: {left} queued trials not run: every host stayed down past --host-timeout; launch again when they answer"
        );
    }
    let incomplete = !summary.abandoned_classes.is_empty();
    // Attempts that ran and are not in the ledger: verdicts derived now
    // would rest on an incomplete record, so the ones there stay.
    let unrecorded = !summary.unrecorded.is_empty();
    if unrecorded {
        eprintln!(
            "error: {} attempts were NOT recorded in the ledger (their trials run again on a later launch):",
            summary.unrecorded.len()
        );
        for u in &summary.unrecorded {
            eprintln!("  {}", progress::unrecorded_line(u));
        }
    }
    // Verdicts: derived from the ledger, rewritten after every launch.
    let record = if unrecorded {
        None
    } else {
        ledger.read_study(&study_id).await.map_err(failed)?
    };
    // Buckets that ended as drafts: (class, bucket label, why).
    let mut drafts: Vec<String> = Vec::new();
    if let Some(record) = record {
        let scan = ledger.scan(&study_id).await.map_err(failed)?;
        let plans = ledger.plans(&study_id).await.map_err(failed)?;
        let (host_records, _) = ledger.hosts(&study_id).await.map_err(failed)?;
        let analysis = report::analyze_planned(&record, &scan, &host_records, &plans);
        for class in &analysis.classes {
            for bucket in &class.buckets {
                let value = serde_json::json!({
                    "schema": crate::ledger::records::SCHEMA,
                    "tunectl_version": analysis.tunectl_version,
                    "study_id": analysis.study_id,
                    "spec_hash": analysis.spec_hash,
                    "host_class": class.host_class,
                    "host_class_label": class.label,
                    "hosts": class.hosts,
                    "objective": analysis.objective,
                    "statistic": analysis.statistic,
                    "context": analysis.context,
                    "baseline": analysis.baseline,
                    "bucket": bucket,
                });
                ledger
                    .write_verdict(&study_id, &class.host_class, &bucket.key, &value)
                    .await
                    .map_err(failed)?;
                if bucket.level != report::analysis::Level::Verdict {
                    drafts.push(format!(
                        "{} · {}: {}",
                        class.host_class, bucket.label, bucket.level_reason
                    ));
                }
                say_err!(
                    "{} · {}: ships {} [{}] · {}",
                    class.host_class,
                    bucket.label,
                    bucket
                        .winner
                        .as_ref()
                        .map(|w| w.label.as_str())
                        .unwrap_or("baseline"),
                    bucket.level.as_str().to_uppercase(),
                    bucket.decision
                );
            }
        }
    }
    say_err!(
        "{} · `tunectl report {}` shows the evidence",
        progress::summary_line(&summary),
        a.study.display()
    );
    if unrecorded {
        return Err(CliError::Failed(format!(
            "the ledger {} could not record every attempt: the launch stopped starting trials, and no verdicts were written (fix the ledger and launch again)",
            ledger.url()
        )));
    }
    if summary.interrupted {
        return Err(CliError::Interrupted);
    }
    if incomplete {
        return Err(CliError::Failed(
            "the study is incomplete: a host class lost every host (see above)".to_string(),
        ));
    }
    if !drafts.is_empty() || summary.dropped_cells > 0 {
        return Err(CliError::Drafts(format!(
            "the launch finished, but not every bucket is a VERDICT ({} {}{}); what export writes for them is not final:\n  {}",
            drafts.len(),
            if drafts.len() == 1 { "draft" } else { "drafts" },
            if summary.dropped_cells > 0 {
                format!(", {} cells dropped after drift", summary.dropped_cells)
            } else {
                String::new()
            },
            drafts.join("\n  ")
        )));
    }
    Ok(())
}

/// Launch rounds at most in one `tunectl launch` (a round starts again when
/// a host's fingerprint changed).
const MAX_LAUNCH_ROUNDS: usize = 3;

/// Where SSH master connections keep their control sockets: a short
/// private directory (socket paths are limited to about 100 bytes).
fn ssh_control_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    // SAFETY: getuid(2) cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = PathBuf::from(format!("/tmp/tunectl-ssh-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    use std::os::unix::fs::MetadataExt;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} must be a directory of yours that only you can read (mode 700)",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The analysis of a study (a study file or a study id) from its ledger,
/// as `report` and `export` see it.
async fn load_analysis(
    study_arg: &str,
    ledger_flag: Option<&str>,
) -> Result<report::Analysis, CliError> {
    let path = Path::new(study_arg);
    let (study_id, study) = if path.is_file() {
        let s = Study::load(path)?;
        (s.id().to_string(), Some(s))
    } else if study_arg.ends_with(".yaml") || study_arg.ends_with(".yml") {
        return Err(CliError::Invalid(format!(
            "{study_arg}: no such study file"
        )));
    } else {
        (study_arg.to_string(), None)
    };
    let url = ledger_url(ledger_flag, study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!(
            "no ledger at `{url}`; run `tunectl launch` first"
        )));
    };
    let Some(record) = ledger.read_study(&study_id).await.map_err(failed)? else {
        return Err(CliError::Failed(format!(
            "study `{study_id}` is not in the ledger `{}`; run `tunectl launch` first",
            ledger.url()
        )));
    };
    if let Some(s) = &study
        && s.spec_hash() != record.spec_hash
    {
        say_err!(
            "warning: {study_arg} has changed since it was launched; reporting the spec recorded in the ledger ({})",
            &record.spec_hash[..12]
        );
    }
    let scan = ledger.scan(&study_id).await.map_err(failed)?;
    let plans = ledger.plans(&study_id).await.map_err(failed)?;
    let (hosts, _) = ledger.hosts(&study_id).await.map_err(failed)?;
    Ok(report::analyze_planned(&record, &scan, &hosts, &plans))
}

async fn report_cmd(a: ReportArgs) -> Result<(), CliError> {
    let analysis = load_analysis(&a.study, a.ledger.as_deref()).await?;
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
            _ => report::render(&analysis, a.format, a.all),
        };
        print!("{text}");
        return Ok(());
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
            say_err!(
                "note: shard {sh}: only this shard's configs are listed; decisions (fastest, what ships) are those of the whole ledger"
            );
            report::render(&analysis, a.format, a.all)
        }
    };
    print!("{text}");
    Ok(())
}

async fn export_cmd(a: ExportArgs) -> Result<(), CliError> {
    let analysis = load_analysis(&a.study, a.ledger.as_deref()).await?;
    if analysis.classes.is_empty() {
        return Err(CliError::Failed(format!(
            "study `{}` has no results in the ledger yet: nothing to export; run `tunectl launch` first",
            analysis.study_id
        )));
    }
    std::fs::create_dir_all(&a.out)
        .map_err(|e| failed(format!("{}: cannot create: {e}", a.out.display())))?;
    for class in &analysis.classes {
        let (name, text) = tuned::export(&analysis, class);
        let path = a.out.join(&name);
        // Write then rename: a reader never sees half a file.
        let tmp = a.out.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| failed(format!("{}: cannot write: {e}", path.display())))?;
        say!("{}", path.display());
        let pending = class
            .buckets
            .iter()
            .filter(|b| tuned::is_pending(b))
            .count();
        let won = class
            .buckets
            .iter()
            .filter(|b| !tuned::is_pending(b) && b.winner.is_some())
            .count();
        say_err!(
            "{} · {}: {} buckets ({won} with a winner, {} keeping the baseline, {pending} pending)",
            class.host_class,
            class.label,
            class.buckets.len(),
            class.buckets.len() - won - pending,
        );
    }
    Ok(())
}

async fn apply_cmd(a: ApplyArgs) -> Result<(), CliError> {
    if a.command.is_empty() && !a.print {
        return Err(CliError::Invalid(
            "apply needs a command after `--` (e.g. `tunectl apply --tuned tuned/ -- ./serve --batch {{ batch }}`), or --print".to_string(),
        ));
    }
    let files = tuned::load(&a.tuned).map_err(CliError::Invalid)?;
    // An edited tuned file must not run values the study never had.
    for w in tuned::check_domains(&files).map_err(CliError::Invalid)? {
        eprintln!("warning: {w}");
    }
    let cell = tuned::parse_cell(&a.cells).map_err(CliError::Invalid)?;
    let axes = tuned::bucket_axes(files.iter().flat_map(|(_, f)| &f.buckets));
    if !axes.is_empty()
        && let Some(unknown) = cell.keys().find(|k| !axes.contains(k))
    {
        return Err(CliError::Invalid(format!(
            "--cell {unknown}: the tuned buckets have no axis `{unknown}` (axes: {})",
            axes.join(", ")
        )));
    }
    let host = tuned::ThisHost {
        class: fingerprint::probe_local(&BTreeMap::new())
            .await
            .map(|fp| (fp.host_class(), fp.class_label()))
            .map_err(|e| e.to_string()),
    };
    let mut choice = tuned::choose(&files, &host, &cell);
    tuned::apply_overrides(&mut choice, |var| std::env::var(var).ok());
    let env = tuned::environment(&choice, &cell);
    let command = if a.command.is_empty() {
        None
    } else {
        let template = a.command.join(" ");
        let vars = tuned::template_vars(&choice.knobs, &cell);
        Some(
            crate::spec::template::render_shell(&template, &vars)
                .map_err(|e| CliError::Invalid(format!("the command `{template}`: {e}")))?,
        )
    };
    if let Some(w) = &choice.warning {
        say_err!("warning: {w}");
    }
    if !choice.from_environment.is_empty() {
        let set: Vec<String> = choice
            .from_environment
            .iter()
            .map(|(k, v)| format!("{}={v}", tuned::knob_var(k)))
            .collect();
        say_err!(
            "note: set in the environment, these win over the {}: {}",
            choice.source.as_str(),
            set.join(" ")
        );
    }
    if a.print {
        print!(
            "{}",
            crate::term::escape_block(&tuned::print_yaml(
                &choice,
                &host,
                &cell,
                &env,
                command.as_deref()
            ))
        );
        return Ok(());
    }
    if choice.warning.is_none() {
        say_err!("tunectl apply: {}", choice.reason);
    }
    let Some(command) = command else {
        return Ok(());
    };
    use std::io::Write as _;
    use std::os::unix::process::CommandExt as _;
    let _ = std::io::stdout().flush();
    // Replace this process: signals reach the command directly and its exit
    // status is ours.
    let err = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&command)
        .envs(env)
        .exec();
    Err(failed(format!("cannot run /bin/sh -c {command}: {err}")))
}

/// A study argument: a study file (loaded) or an id.
fn study_arg(arg: &str) -> Result<(String, Option<Study>), CliError> {
    let path = Path::new(arg);
    if path.is_file() {
        let s = Study::load(path)?;
        Ok((s.id().to_string(), Some(s)))
    } else if arg.ends_with(".yaml") || arg.ends_with(".yml") {
        Err(CliError::Invalid(format!("{arg}: no such study file")))
    } else {
        Ok((arg.to_string(), None))
    }
}

#[derive(Serialize, Default)]
struct ClassStatus {
    host_class: String,
    label: String,
    hosts: Vec<String>,
    /// Sweep trials (the planned grid) done, failed, and lost without a
    /// later terminal attempt.
    done: u64,
    failed: u64,
    lost: u64,
    running: u64,
    /// Baseline anchors and confirmation-round trials recorded (not part
    /// of the planned sweep).
    anchors: u64,
    confirm_trials: u64,
    /// An adaptive search's screening runs (rung trials) finished.
    screening: u64,
    /// Planned sweep trials without a terminal attempt and not running;
    /// `None` without the study file.
    pending: Option<u64>,
    /// Planned sweep trials that will not run: their config failed in that
    /// cell, or the cell's baseline failed.
    skipped: Option<u64>,
    planned: Option<u64>,
}

async fn status_cmd(a: StatusArgs) -> Result<(), CliError> {
    let (study_id, study) = study_arg(&a.study)?;
    let url = ledger_url(a.ledger.as_deref(), study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!("no ledger at `{url}`")));
    };
    ledger.check_reachable().await.map_err(failed)?;
    if ledger
        .read_study(&study_id)
        .await
        .map_err(failed)?
        .is_none()
    {
        return Err(CliError::Failed(format!(
            "study `{study_id}` is not in the ledger `{}`",
            ledger.url()
        )));
    }
    let scan = ledger.scan(&study_id).await.map_err(failed)?;
    let (hosts, _) = ledger.hosts(&study_id).await.map_err(failed)?;
    let leases = ledger.live_leases(&study_id).await.map_err(failed)?;
    let mut classes: BTreeMap<String, ClassStatus> = BTreeMap::new();
    for h in &hosts {
        let c = classes
            .entry(h.host_class.clone())
            .or_insert_with(|| ClassStatus {
                host_class: h.host_class.clone(),
                ..Default::default()
            });
        c.label = h.class_label.clone();
        if !c.hosts.contains(&h.host) {
            c.hosts.push(h.host.clone());
        }
    }
    let terminal = scan.terminal();
    let mut key_class: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, attempts) in scan.by_trial() {
        let Some(first) = attempts.first() else {
            continue;
        };
        key_class.insert(key, first.host_class.as_str());
        let c = classes.entry(first.host_class.clone()).or_default();
        c.host_class = first.host_class.clone();
        match first.role {
            crate::trial::RoleKind::Anchor => {
                // An anchor lost with its host is not a missing trial.
                c.anchors += u64::from(terminal.contains_key(key));
                continue;
            }
            crate::trial::RoleKind::Confirm => {
                c.confirm_trials += u64::from(terminal.contains_key(key));
                continue;
            }
            crate::trial::RoleKind::Rung => {
                c.screening += u64::from(terminal.contains_key(key));
                continue;
            }
            // Not a trial of any plan: nothing this tunectl runs or waits for.
            crate::trial::RoleKind::Unknown(_) => continue,
            crate::trial::RoleKind::Sweep => {}
        }
        match terminal.get(key).map(|t| t.status) {
            Some(crate::ledger::AttemptStatus::Ok) => c.done += 1,
            Some(_) => c.failed += 1,
            None => c.lost += 1,
        }
    }
    for l in &leases {
        let class = key_class.get(l.trial_key.as_str()).copied().or_else(|| {
            hosts
                .iter()
                .rev()
                .find(|h| h.host == l.host)
                .map(|h| h.host_class.as_str())
        });
        if let Some(class) = class
            && let Some(c) = classes.get_mut(class)
        {
            c.running += 1;
            // A running trial with an earlier lost attempt is not lost.
            if key_class.contains_key(l.trial_key.as_str())
                && !terminal.contains_key(l.trial_key.as_str())
            {
                c.lost = c.lost.saturating_sub(1);
            }
        }
    }
    // An adaptive search's sweep trials (its objective stage) are known
    // only as its results arrive: no pending count.
    if let Some(study) = study.as_ref().filter(|s| !s.strategy.is_adaptive()) {
        let plan_hosts: Vec<PlanHost> = classes
            .values()
            .map(|c| PlanHost {
                name: c.hosts.first().cloned().unwrap_or_default(),
                transport: "recorded".to_string(),
                slots: 1,
                class: Some(ClassInfo {
                    id: c.host_class.clone(),
                    label: c.label.clone(),
                }),
            })
            .collect();
        if let Ok(plan) = Plan::build(study, &plan_hosts) {
            let running: std::collections::HashSet<&str> =
                leases.iter().map(|l| l.trial_key.as_str()).collect();
            let mut failed_configs: std::collections::HashSet<(&str, u32, u64)> =
                Default::default();
            let mut failed_baselines: std::collections::HashSet<(&str, u32)> = Default::default();
            for a in terminal.values() {
                if a.role == crate::trial::RoleKind::Sweep
                    && a.status == crate::ledger::AttemptStatus::Failed
                {
                    failed_configs.insert((a.host_class.as_str(), a.cell_index, a.config_index));
                    if a.is_baseline && a.repeat == 0 {
                        failed_baselines.insert((a.host_class.as_str(), a.cell_index));
                    }
                }
            }
            for c in classes.values_mut() {
                let (mut pending, mut skipped) = (0u64, 0u64);
                for (ci, cell) in plan.cells.iter().enumerate() {
                    let cell_json = space::cell_json(study, cell);
                    let configs = std::iter::once(plan.space.baseline())
                        .chain(plan.per_cell[ci].iter().copied());
                    for config in configs {
                        let config_json = plan.space.config_json(study, config);
                        for repeat in 0..plan.repeats {
                            let key = TrialIdentity {
                                study: study.id(),
                                config: &config_json,
                                cell: &cell_json,
                                fidelity: study.objective_budget(),
                                repeat,
                                host_class: &c.host_class,
                                role: crate::trial::Role::Sweep,
                            }
                            .key();
                            if terminal.contains_key(key.as_str()) || running.contains(key.as_str())
                            {
                                continue;
                            }
                            let cell_index = ci as u32;
                            if failed_baselines.contains(&(c.host_class.as_str(), cell_index))
                                || failed_configs.contains(&(
                                    c.host_class.as_str(),
                                    cell_index,
                                    config,
                                ))
                            {
                                skipped += 1;
                            } else {
                                pending += 1;
                            }
                        }
                    }
                }
                c.planned = Some(plan.trials_per_class());
                c.pending = Some(pending);
                c.skipped = Some(skipped);
            }
        }
    }
    let rows: Vec<&ClassStatus> = classes.values().collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(failed)?);
        return Ok(());
    }
    say!("study {study_id} · ledger {}", ledger.url());
    if rows.is_empty() {
        say!("no host has been probed for this study yet");
    }
    for c in rows {
        let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "?".to_string());
        say!(
            "{} · {} · hosts: {}\n  done {} · failed {} · lost {} · running {} · pending {} · skipped {} (of {} planned sweep trials){}; besides: {} baseline anchors, {} confirmation trials",
            c.host_class,
            c.label,
            c.hosts.join(", "),
            c.done,
            c.failed,
            c.lost,
            c.running,
            opt(c.pending),
            opt(c.skipped),
            opt(c.planned),
            match (&study, c.pending) {
                (_, Some(_)) => String::new(),
                (Some(s), None) if s.strategy.is_adaptive() => format!(
                    " · {} screening runs of the {} search done; its sweep trials are planned as it goes",
                    c.screening,
                    s.strategy.name()
                ),
                _ => " · give the study file for pending counts".to_string(),
            },
            c.anchors,
            c.confirm_trials
        );
    }
    if !scan.corrupt.is_empty() {
        say!(
            "{} unreadable ledger objects (`tunectl ledger check` lists them)",
            scan.corrupt.len()
        );
    }
    Ok(())
}

async fn ledger_check(a: LedgerCheckArgs) -> Result<(), CliError> {
    let (ids, study) = match &a.study {
        Some(arg) => {
            let (id, s) = study_arg(arg)?;
            (Some(vec![id]), s)
        }
        None => (None, None),
    };
    let url = ledger_url(a.ledger.as_deref(), study.as_ref(), None);
    let Some(ledger) = Ledger::open_existing(&url).map_err(failed)? else {
        return Err(CliError::Failed(format!("no ledger at `{url}`")));
    };
    ledger.check_reachable().await.map_err(failed)?;
    let ids = match ids {
        Some(ids) => ids,
        // Every prefix that holds a study's objects, with or without a
        // readable study record.
        None => ledger.study_prefixes().await.map_err(failed)?,
    };
    let (mut unreadable, mut missing, mut records) = (0, 0, 0);
    for id in &ids {
        let record = ledger.study_record_problem(id).await.map_err(failed)?;
        // Every object listed and read, whatever the index says.
        let checked = ledger.check_study(id).await.map_err(failed)?;
        let scan = &checked.scan;
        say!(
            "{id}: {} attempts readable, {} voided, {} unreadable, {} missing",
            scan.attempts.len(),
            scan.voided,
            scan.corrupt.len(),
            checked.missing.len()
        );
        if let Some(problem) = &record {
            say!("  {id}/study.json: {problem}");
            records += 1;
        }
        let mut damaged: Vec<&crate::ledger::CorruptObject> =
            scan.corrupt.iter().chain(&checked.missing).collect();
        damaged.sort_by(|x, y| x.key.cmp(&y.key));
        for c in damaged {
            say!("  {}: {}", c.key, c.reason);
        }
        unreadable += scan.corrupt.len();
        missing += checked.missing.len();
    }
    let mut found = Vec::new();
    if records > 0 {
        found.push(format!("{records} damaged or missing study records"));
    }
    if unreadable > 0 {
        found.push(format!("{unreadable} unreadable objects"));
    }
    if missing > 0 {
        found.push(format!("{missing} missing objects"));
    }
    if !found.is_empty() {
        return Err(CliError::Failed(format!(
            "{} in ledger {} (listed above)",
            found.join(", "),
            ledger.url()
        )));
    }
    Ok(())
}

async fn fingerprint_cmd(a: FingerprintArgs) -> Result<(), CliError> {
    let tools = match &a.study {
        Some(p) => Study::load(p)?.tools,
        None => BTreeMap::new(),
    };
    if let Some(path) = &a.inventory {
        return fingerprint_inventory(path, &tools, a.json).await;
    }
    let fp = fingerprint::probe_local(&tools).await.map_err(failed)?;
    let doc = serde_json::json!({
        "host_class": fp.host_class(),
        "class_label": fp.class_label(),
        "fingerprint_hash": fp.hash(),
        "fingerprint": fp,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc).map_err(failed)?);
    } else {
        print!("{}", crate::term::escape_block(&yaml_out::to_yaml(&doc)));
    }
    Ok(())
}

/// `fingerprint --inventory`: probe every host at once; hosts grouped by
/// class. A host that does not answer is listed with why (exit 1).
async fn fingerprint_inventory(
    path: &Path,
    tools: &BTreeMap<String, String>,
    json: bool,
) -> Result<(), CliError> {
    let inv = Inventory::load(path)?;
    let control_dir = ssh_control_dir().map_err(failed)?;
    let work_root = std::env::temp_dir().join("tunectl-work");
    let mut transports: Vec<(String, Arc<dyn crate::exec::Transport>)> = Vec::new();
    for h in &inv.hosts {
        transports.push((
            h.name.clone(),
            transport_for(h, &inv, &work_root, &control_dir, false)?,
        ));
    }
    let probes = futures::future::join_all(transports.iter().map(|(_, t)| t.probe(tools))).await;
    let mut classes: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let mut down = Vec::new();
    for ((name, t), probe) in transports.iter().zip(probes) {
        t.close().await;
        match probe {
            Ok(fp) => {
                let entry = classes.entry(fp.host_class()).or_insert_with(|| {
                    serde_json::json!({
                        "host_class": fp.host_class(),
                        "class_label": fp.class_label(),
                        "hosts": [],
                    })
                });
                if let Some(hosts) = entry["hosts"].as_array_mut() {
                    hosts.push(serde_json::json!({
                        "host": name,
                        "fingerprint_hash": fp.hash(),
                        "fingerprint": fp,
                    }));
                }
            }
            Err(e) => down.push(serde_json::json!({"host": name, "error": e})),
        }
    }
    let doc = serde_json::json!({
        "classes": classes.into_values().collect::<Vec<_>>(),
        "unreachable": down,
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&doc).map_err(failed)?);
    } else {
        print!("{}", crate::term::escape_block(&yaml_out::to_yaml(&doc)));
    }
    if down.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "{} host(s) did not answer",
            down.len()
        )))
    }
}

/// The transport that reaches an inventory host.
fn transport_for(
    h: &crate::spec::Host,
    inv: &Inventory,
    work_root: &Path,
    control_dir: &Path,
    keep_workdirs: bool,
) -> Result<Arc<dyn crate::exec::Transport>, CliError> {
    Ok(match &h.transport {
        Transport::Ssh(cfg) => Arc::new(SshTransport::new(
            &h.name,
            cfg.clone(),
            control_dir.to_path_buf(),
            keep_workdirs,
        )),
        Transport::Slurm(cfg) => {
            let login = match cfg.login.as_str() {
                "local" => crate::exec::slurm::Login::Local,
                name => match inv.host(name).map(|l| &l.transport) {
                    Some(Transport::Ssh(ssh)) => crate::exec::slurm::Login::Ssh(Arc::new(
                        SshTransport::new(name, ssh.clone(), control_dir.to_path_buf(), false),
                    )),
                    _ => {
                        return Err(CliError::Invalid(format!(
                            "host `{}`: login `{name}` is not an ssh host of the inventory",
                            h.name
                        )));
                    }
                },
            };
            let template = match &cfg.batch_template {
                Some(p) => {
                    let base = inv
                        .source
                        .as_deref()
                        .and_then(Path::parent)
                        .unwrap_or(Path::new("."));
                    let path = base.join(p);
                    Some(std::fs::read_to_string(&path).map_err(|e| {
                        CliError::Invalid(format!(
                            "host `{}`: batch_template {}: {e}",
                            h.name,
                            path.display()
                        ))
                    })?)
                }
                None => None,
            };
            Arc::new(crate::exec::slurm::SlurmTransport::new(
                &h.name,
                cfg.clone(),
                login,
                template,
                keep_workdirs,
            ))
        }
        Transport::Local => Arc::new(LocalTransport {
            work_root: work_root.to_path_buf(),
            keep_workdirs,
        }),
    })
}

fn validate(a: ValidateArgs) -> Result<(), CliError> {
    let mut all = Diagnostics::default();
    for f in &a.files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let is_inventory = text.lines().any(|l| l.starts_with("hosts:"));
        let r = if is_inventory {
            Inventory::load(f).map(|_| "inventory")
        } else {
            Study::load(f).map(|_| "study")
        };
        match r {
            Ok(kind) => say_err!("{}: valid {kind}", f.display()),
            Err(d) => all.extend(d),
        }
    }
    if all.is_empty() {
        Ok(())
    } else {
        Err(all.into())
    }
}
