//! The `tunectl` binary: parse, run, print the error once, exit with a
//! documented code (see docs/cli.md).

use std::process::ExitCode;

fn main() -> ExitCode {
    tunectl::cli::main()
}
