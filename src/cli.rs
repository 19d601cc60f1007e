//! Command-line interface: the arguments of every command (clap) and the
//! dispatch to its body in [`crate::commands`], which also says what the
//! exit codes are.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands::{self, CliError, say_err};
use crate::exec::progress::ProgressMode;
use crate::report::Format;

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
pub enum Command {
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
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), e.g. `tunectl man | man -l -`.
    Man,
}

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell, e.g. `tunectl completions bash > ~/.local/share/bash-completion/completions/tunectl`.
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The study file.
    pub study: PathBuf,
    /// Inventory file (default: this machine, one slot).
    #[arg(long, short)]
    pub inventory: Option<PathBuf>,
    /// Ledger URL or path (default: the study's `ledger`, the inventory's, or ./ledgers).
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Spend nothing and write nothing (always the case for `plan`).
    #[arg(long)]
    pub dry_run: bool,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// How many configs to show with their rendered commands.
    #[arg(long, default_value_t = 5)]
    pub show: usize,
    /// Plan one shard of a grid: `i/n` (1-based), the baseline and the
    /// i-th of n contiguous slices of the grid's candidates.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    pub shard: Option<crate::search::Shard>,
}

#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    pub study: PathBuf,
    #[arg(long, short)]
    pub inventory: Option<PathBuf>,
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Only use these inventory hosts (repeatable).
    #[arg(long = "host")]
    pub hosts: Vec<String>,
    /// Where attempts get their fresh directories.
    #[arg(long, env = "TUNECTL_WORKDIR")]
    pub workdir: Option<PathBuf>,
    /// Keep the directories of successful attempts too (failed ones are always kept).
    #[arg(long)]
    pub keep_workdirs: bool,
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// Start a new study (id `<name>-<spec hash>`) when the spec differs from the ledger's.
    #[arg(long)]
    pub fork: bool,
    /// Report drift of the baseline anchors but discard nothing and never cool down.
    #[arg(long)]
    pub no_cooldown: bool,
    /// Store every attempt's full stdout and stderr in the ledger beside it
    /// (`<attempt>.stdout.log`, `<attempt>.stderr.log`; 64 MiB each at most).
    #[arg(long)]
    pub store_logs: bool,
    /// How long the trials of a host class wait when every host of the
    /// class is down, before they are left for a later launch (e.g. `10m`).
    #[arg(long, value_parser = crate::spec::yaml::parse_duration, default_value = "10m")]
    pub host_timeout: std::time::Duration,
    /// Run one shard of a grid: `i/n` (1-based): the baseline and the i-th
    /// of n contiguous slices of the grid's candidates, no confirmation
    /// round. Shards may share a ledger or each have one.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    pub shard: Option<crate::search::Shard>,
    /// Warm-start an adaptive search from an earlier study of the same
    /// knobs: `<ledger URL or path>#<study id>`, or a study id in this
    /// launch's ledger. Configs that failed there on a host class are not
    /// tried again on it; TPE starts from its values.
    #[arg(long)]
    pub seed_from: Option<String>,
    /// A shell command run on this machine when the launch ends, with the
    /// outcome as JSON on its stdin (overrides the inventory's `notify`).
    #[arg(long, value_name = "COMMAND")]
    pub notify: Option<String>,
    /// Launch although the plan's estimate exceeds `budget.max_trial_time`,
    /// or remote hosts run without one.
    #[arg(long)]
    pub yes: bool,
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A study file, or a study id in the ledger.
    pub study: String,
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Show every eligible config, not only the baseline, the best and the rejected.
    #[arg(long)]
    pub all: bool,
    /// Only the configs of one shard of a grid (`i/n`, as given to launch);
    /// needs the study file. With `--format measurements`, the rows of
    /// shards 1/n .. n/n concatenated equal those of the full grid.
    #[arg(long, value_parser = crate::search::Shard::parse)]
    pub shard: Option<crate::search::Shard>,
    /// Write the report to FILE instead of stdout (any format; `html` is
    /// one self-contained page).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// A study file, or a study id in the ledger.
    pub study: String,
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    /// Directory for the tuned files (created if missing).
    #[arg(long, default_value = "tuned")]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// A tuned file, or a directory of them (every *.yaml in it).
    #[arg(long)]
    pub tuned: PathBuf,
    /// The workload cell, one axis per flag (e.g. `--cell batch=4`): picks the bucket.
    #[arg(long = "cell", value_name = "AXIS=VALUE")]
    pub cells: Vec<String>,
    /// Print the chosen knobs, the environment and why, as YAML; run nothing.
    #[arg(long)]
    pub print: bool,
    /// The command, after `--`: a template (`{{ knob }}` is replaced by the
    /// knob's value, shell-quoted) run with `/bin/sh -c`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// A study file (pending counts need it), or a study id in the ledger.
    pub study: String,
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum LedgerCommand {
    /// List objects that cannot be read as what their key says (they are
    /// ignored and their trials run again). Exits 1 when there are any.
    Check(LedgerCheckArgs),
}

#[derive(clap::Args, Debug)]
pub struct LedgerCheckArgs {
    /// A study file or id; every study in the ledger when omitted.
    pub study: Option<String>,
    #[arg(long, env = "TUNECTL_LEDGER")]
    pub ledger: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct FingerprintArgs {
    /// Also probe the tool versions this study asks for.
    #[arg(long)]
    pub study: Option<PathBuf>,
    /// Print JSON instead of YAML.
    #[arg(long)]
    pub json: bool,
    /// Probe every host of this inventory (local, ssh) instead of this
    /// machine, and group them into host classes.
    #[arg(long, short)]
    pub inventory: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Study or inventory files (an inventory has a `hosts` key).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Parse the arguments, run the command, exit with its code.
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
        Err(e) => e.exit(),
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Plan(a) => commands::plan::run(a).await,
        Command::Launch(a) => commands::launch::run(a).await,
        Command::Report(a) => commands::report::run(a).await,
        Command::Export(a) => commands::export::run(a).await,
        Command::Apply(a) => commands::apply::run(a).await,
        Command::Status(a) => commands::status::run(a).await,
        Command::Ledger(LedgerCommand::Check(a)) => commands::ledger::check(a).await,
        Command::Fingerprint(a) => commands::fingerprint::run(a).await,
        Command::Validate(a) => commands::validate::run(a),
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "tunectl", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd)
                .render(&mut std::io::stdout())
                .map_err(|e| commands::failed(format!("cannot write the manual page: {e}")))
        }
    }
}
