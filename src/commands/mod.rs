//! The bodies of the `tunectl` commands, one module each; [`crate::cli`]
//! parses the arguments and calls them. Data goes to stdout (tables, JSON);
//! progress, warnings and errors go to stderr.
//!
//! Exit codes ([`CliError::exit`], docs/cli.md): 0 success (rejected
//! trials are results, not errors); 1 the study could not run (ledger, host
//! or internal error); 2 invalid input (study, inventory or arguments);
//! 3 a launch that finished with buckets that are not verdicts; 130
//! interrupted.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::spec::Diagnostics;

pub mod apply;
pub mod export;
pub mod fingerprint;
pub mod hosts;
pub mod inputs;
pub mod launch;
pub mod ledger;
pub mod logs;
pub mod notify;
pub mod plan;
pub mod report;
pub mod status;
pub mod validate;

pub use crate::schema;
pub use output::{FormatArgs, OutputFormat, print_json};
mod output;

// The output macros are defined after the modules and imported by path
// (`use super::say`), so each module says what it uses.
/// A line for people on stdout: control characters in it (from a study, a
/// host, a trial) are shown escaped ([`crate::term`]). JSON goes out with
/// its own escaping. Both through [`crate::term::out`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::term::out(&format!("{}\n", $crate::term::escape_block(&format!($($arg)*))))
    };
}

/// [`say!`] on stderr.
macro_rules! say_err {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::term::escape_block(&format!($($arg)*)))
    };
}

/// [`say_err!`] for what is neither a warning nor an error (what was
/// chosen, what was written, how far a launch got): not said under
/// `--quiet`.
macro_rules! note {
    ($($arg:tt)*) => {
        if !$crate::commands::quiet() {
            $crate::commands::say_err!($($arg)*)
        }
    };
}

pub(crate) use {note, say, say_err};

/// `--quiet`, set once by [`crate::cli::main`] before any command runs.
static QUIET: AtomicBool = AtomicBool::new(false);

/// Say no notes and no progress on stderr from now on (warnings and
/// errors still).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// What a command's end comes to: its exit code (docs/cli.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: success (a launch: every bucket is a VERDICT).
    Success,
    /// 1: the study could not run or did not finish.
    Failed,
    /// 2: invalid input.
    Invalid,
    /// 3: a launch that finished with buckets that are not verdicts.
    Drafts,
    /// 4: a launch that stopped making progress.
    Stalled,
    /// 130: interrupted (Ctrl-C).
    Interrupted,
}

impl Exit {
    /// The exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Invalid => 2,
            Exit::Drafts => 3,
            Exit::Stalled => 4,
            Exit::Interrupted => 130,
        }
    }
}

/// What went wrong, mapped to an exit code.
#[derive(Debug)]
pub enum CliError {
    Invalid(String),
    Failed(String),
    /// A launch that ended otherwise than with a verdict for every bucket
    /// ([`launch::exit_of`]): its exit and what is said of it (`None`:
    /// said as it happened).
    Launch(Exit, Option<String>),
}

impl From<Diagnostics> for CliError {
    fn from(d: Diagnostics) -> Self {
        CliError::Invalid(d.to_string())
    }
}

impl CliError {
    /// What the error comes to.
    pub fn status(&self) -> Exit {
        match self {
            CliError::Invalid(_) => Exit::Invalid,
            CliError::Failed(_) => Exit::Failed,
            CliError::Launch(exit, _) => *exit,
        }
    }

    /// The exit code (docs/cli.md).
    pub fn code(&self) -> u8 {
        self.status().code()
    }

    /// What is said on stderr; `None` for an interrupt (said as it
    /// happened).
    pub fn message(&self) -> Option<&str> {
        match self {
            CliError::Invalid(m) | CliError::Failed(m) => Some(m),
            CliError::Launch(_, m) => m.as_deref(),
        }
    }

    /// Say what went wrong on stderr (once) and give the exit code.
    pub fn exit(self) -> ExitCode {
        let word = match self.status() {
            Exit::Drafts => "note",
            _ => "error",
        };
        if let Some(m) = self.message() {
            say_err!("{word}: {m}");
        }
        ExitCode::from(self.code())
    }
}

/// An error the study could not run past (exit 1).
pub fn failed(e: impl std::fmt::Display) -> CliError {
    CliError::Failed(e.to_string())
}
