//! Command-line interface: the top-level arguments and the subcommands
//! (clap), and the dispatch to each command's body in [`crate::commands`],
//! where each command's own arguments live beside it (so that `commands`
//! never imports `cli`), and which also says what the exit codes are.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands::apply::ApplyArgs;
use crate::commands::export::ExportArgs;
use crate::commands::fingerprint::FingerprintArgs;
use crate::commands::launch::LaunchArgs;
use crate::commands::ledger::LedgerCheckArgs;
use crate::commands::logs::LogsArgs;
use crate::commands::plan::PlanArgs;
use crate::commands::report::ReportArgs;
use crate::commands::status::StatusArgs;
use crate::commands::validate::ValidateArgs;
use crate::commands::{self, CliError, say_err};

#[derive(Parser, Debug)]
#[command(
    name = "tunectl",
    version,
    about = "Find the fastest knob settings per class of machine that neither crash nor change output",
    after_help = help::TOP
)]
pub struct Cli {
    /// Say only warnings and errors on stderr: no notes, no progress.
    #[arg(long, short, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// More log detail on stderr: `-v` info, `-vv` debug, `-vvv` trace
    /// (instead of `TUNECTL_LOG`).
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Colour in the log on stderr: `auto` on a terminal unless `NO_COLOR`
    /// is set, `always` (even into a pipe or file), `never`.
    #[arg(long, global = true, value_enum, default_value_t = ColorWhen::Auto, value_name = "WHEN")]
    color: ColorWhen,
    #[command(subcommand)]
    command: Command,
}

/// When the log on stderr is coloured (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

/// What `--help` shows after the options: examples and exit codes
/// (docs/cli.md has the whole story).
mod help {
    pub const TOP: &str = "\
Examples:
  tunectl validate study.yaml inventory.yaml
  tunectl plan study.yaml -i inventory.yaml
  tunectl launch study.yaml -i inventory.yaml
  tunectl report study.yaml
  tunectl export study.yaml --out tuned/

Every command that prints data takes `--format json` (schemas in docs/json.md).

Exit codes: 0 success (rejected configs are results); 1 the study could not run \
(ledger, host or internal error); 2 invalid input (study, inventory, arguments); \
3 launch: not every bucket is a VERDICT; 4 launch: stalled; 130 interrupted.";

    pub const PLAN: &str = "\
Examples:
  tunectl plan study.yaml
  tunectl plan study.yaml -i inventory.yaml --show 10
  tunectl plan study.yaml --format json | jq .total_trials

Exit codes: 0 the plan was printed; 1 the ledger could not be read or this \
machine not probed; 2 invalid study, inventory or arguments.";

    pub const LAUNCH: &str = "\
Examples:
  tunectl launch study.yaml
  tunectl launch study.yaml -i inventory.yaml --ledger s3://bucket/tunectl
  tunectl launch study.yaml --shard 2/4 --progress plain
  tunectl launch study.yaml --format json > outcome.json

Exit codes: 0 every bucket is a VERDICT; 1 the study could not run or did not \
finish (ledger, hosts, trial-time cap); 2 invalid input, a changed spec \
(see --fork) or a spend not acknowledged (see --yes); 3 finished, but not \
every bucket is a VERDICT; 4 stalled; 130 interrupted.";

    pub const REPORT: &str = "\
Examples:
  tunectl report study.yaml
  tunectl report my-study --ledger s3://bucket/tunectl --all
  tunectl report study.yaml --format json | jq '.classes[].buckets[].decision'

Exit codes: 0 the report was printed; 1 the ledger could not be read or holds \
no such study; 2 invalid study file or arguments.";

    pub const EXPORT: &str = "\
Examples:
  tunectl export study.yaml --out tuned/
  tunectl export my-study --ledger s3://bucket/tunectl --format json
  tunectl export study.yaml --format parquet --samples -o samples.parquet

Exit codes: 0 the tuned files were written; 1 no results yet, or the ledger \
could not be read or a file not written; 2 invalid input, or --out holds \
another study's tuned files.";

    pub const APPLY: &str = "\
Examples:
  tunectl apply --tuned tuned/ --cell batch=8 -- ./serve --batch {{ batch }}
  tunectl apply --tuned tuned/ --cell batch=8 --print

Exit codes: the command's own when it runs; 1 /bin/sh could not be started; \
2 invalid input (tuned file, --cell, template, no command without --print).";

    pub const STATUS: &str = "\
Examples:
  tunectl status study.yaml
  tunectl status my-study --ledger s3://bucket/tunectl --format json

Exit codes: 0 the status was printed; 1 the ledger could not be read or holds \
no such study; 2 invalid study file or arguments.";

    pub const LOGS: &str = "\
Examples:
  tunectl logs study.yaml
  tunectl logs study.yaml --config 'accum=i32' --cell n=500000
  tunectl logs my-study --ledger s3://bucket/tunectl --status all --limit 5 --format json

Exit codes: 0 the attempts were printed (or none matched); 1 the ledger could \
not be read or holds no such study; 2 invalid study file or arguments.";

    pub const LEDGER_CHECK: &str = "\
Examples:
  tunectl ledger check --ledger ./ledgers
  tunectl ledger check study.yaml --format json

Exit codes: 0 no damage found; 1 damage found, or the ledger could not be \
checked; 2 invalid arguments.";

    pub const FINGERPRINT: &str = "\
Examples:
  tunectl fingerprint
  tunectl fingerprint --study study.yaml --format json
  tunectl fingerprint -i inventory.yaml

Exit codes: 0 printed; 1 this machine could not be probed, or a host of the \
inventory did not answer; 2 invalid study, inventory or arguments.";

    pub const VALIDATE: &str = "\
Examples:
  tunectl validate study.yaml inventory.yaml
  tunectl validate study.yaml --format json

Exit codes: 0 every file is valid; 2 a file has a problem (each is listed as \
file:line:column: key.path: message).";

    pub const COMPLETIONS: &str = "\
Examples:
  tunectl completions bash > ~/.local/share/bash-completion/completions/tunectl
  tunectl completions zsh > ~/.zfunc/_tunectl

Exit codes: 0 printed; 2 unknown shell.";

    pub const MAN: &str = "\
Examples:
  tunectl man | man -l -
  tunectl man --out ~/.local/share/man/man1    # then: man tunectl-launch

Exit codes: 0 printed; 1 it could not be written.";
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show what a launch would run, where, and at what cost. Spends nothing.
    #[command(after_help = help::PLAN)]
    Plan(PlanArgs),
    /// Run a study's trials and record every attempt in the ledger.
    #[command(after_help = help::LAUNCH)]
    Launch(LaunchArgs),
    /// Per host class and cell: baseline, winner, rejected configs.
    #[command(after_help = help::REPORT)]
    Report(ReportArgs),
    /// Write one tuned file per host class: the knobs that ship per bucket.
    #[command(after_help = help::EXPORT)]
    Export(ExportArgs),
    /// Run a command with the tuned knobs of this host's class (else the defaults).
    #[command(after_help = help::APPLY)]
    Apply(ApplyArgs),
    /// Per host class: trials done, failed, lost, running and pending.
    #[command(after_help = help::STATUS)]
    Status(StatusArgs),
    /// What trials printed: the failed ones by default, with their command,
    /// exit and stdout/stderr.
    #[command(after_help = help::LOGS)]
    Logs(LogsArgs),
    /// Inspect the ledger itself.
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Probe this machine and print its fingerprint and host class.
    #[command(after_help = help::FINGERPRINT)]
    Fingerprint(FingerprintArgs),
    /// Validate study and inventory files.
    #[command(after_help = help::VALIDATE)]
    Validate(ValidateArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = help::COMPLETIONS)]
    Completions(CompletionsArgs),
    /// Print the manual page (roff), e.g. `tunectl man | man -l -`; with
    /// `--out DIR`, write one page per command there.
    #[command(after_help = help::MAN)]
    Man(ManArgs),
}

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell, e.g. `tunectl completions bash > ~/.local/share/bash-completion/completions/tunectl`.
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write a page per command into DIR (`tunectl.1`, `tunectl-launch.1`,
    /// `tunectl-ledger-check.1`, ...), made if missing, and list them on
    /// stdout, instead of printing the top page.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum LedgerCommand {
    /// List objects that cannot be read as what their key says (they are
    /// ignored and their trials run again). Exits 1 when there are any.
    #[command(after_help = help::LEDGER_CHECK)]
    Check(LedgerCheckArgs),
}

/// Parse the arguments, run the command, exit with its code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    commands::set_quiet(cli.quiet);
    // `-v` overrides TUNECTL_LOG; `--quiet` keeps warnings, so it leaves
    // the level alone.
    let filter = match cli.verbose {
        0 => tracing_subscriber::EnvFilter::try_from_env("TUNECTL_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        1 => tracing_subscriber::EnvFilter::new("info"),
        2 => tracing_subscriber::EnvFilter::new("debug"),
        _ => tracing_subscriber::EnvFilter::new("trace"),
    };
    // By default colour only on a terminal, and not with NO_COLOR set
    // (https://no-color.org): a log piped to a file stays plain text. An
    // explicit `--color` wins over both.
    let colour = match cli.color {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            use std::io::IsTerminal as _;
            std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
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
        Ok(()) => match crate::term::stdout_failure() {
            // What the command printed is incomplete: not a success.
            Some(e) => {
                say_err!("error: cannot write to standard output: {e}");
                ExitCode::from(1)
            }
            None => ExitCode::SUCCESS,
        },
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
        Command::Logs(a) => commands::logs::run(a).await,
        Command::Ledger(LedgerCommand::Check(a)) => commands::ledger::check(a).await,
        Command::Fingerprint(a) => commands::fingerprint::run(a).await,
        Command::Validate(a) => commands::validate::run(a),
        Command::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(a.shell, &mut cmd, "tunectl", &mut script);
            crate::term::out(&String::from_utf8_lossy(&script));
            Ok(())
        }
        Command::Man(ManArgs { out: Some(dir) }) => {
            /// Each command's page, its subcommands' first (as
            /// `clap_mangen::generate_to` writes them), and where it went.
            fn pages(
                cmd: clap::Command,
                dir: &std::path::Path,
                out: &mut Vec<std::path::PathBuf>,
            ) -> std::io::Result<()> {
                for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                    pages(sub.clone(), dir, out)?;
                }
                out.push(clap_mangen::Man::new(cmd).generate_to(dir)?);
                Ok(())
            }
            let mut cmd = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
            // Built, so that subcommands have their full names
            // (`tunectl-ledger-check`).
            cmd.build();
            let mut written = Vec::new();
            std::fs::create_dir_all(&dir)
                .and_then(|()| pages(cmd, &dir, &mut written))
                .map_err(|e| {
                    commands::failed(format!(
                        "cannot write the manual pages to {}: {e}",
                        dir.display()
                    ))
                })?;
            written.sort();
            let list: String = written
                .iter()
                .map(|p| format!("{}\n", p.display()))
                .collect();
            crate::term::out(&list);
            Ok(())
        }
        Command::Man(ManArgs { out: None }) => {
            let cmd = <Cli as clap::CommandFactory>::command();
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut page)
                .map_err(|e| commands::failed(format!("cannot write the manual page: {e}")))?;
            crate::term::out(&String::from_utf8_lossy(&page));
            Ok(())
        }
    }
}
