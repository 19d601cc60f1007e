//! The integration tests, one test binary (`cargo test --test it`) that
//! links the crate once. Each module is one area, run through the tunectl
//! binary and the shared harness in [`support`]. Run one module with a
//! filter on its path, e.g. `cargo test --test it verdict::`, or one test
//! with its full path, e.g. `cargo test --test it -- --exact
//! verdict::the_fastest_config_wins_and_is_confirmed`; `--list` names them
//! all.
//!
//! All tests of every module run as threads of this one process: nothing
//! here may change the process's environment or working directory, and
//! anything a test names on this machine (a port, a path, a cluster or a
//! fleet) must be unique to the test, not just to the process.
//!
//! The sshd, Slurm and S3 tests need their servers: docs/testing.md says
//! how scripts/test.sh provides them.

mod support;

mod bad_input;
mod cli_help;
mod continuation;
mod examples;
mod export_apply;
mod export_data;
mod fuzz_regressions;
mod html_report;
mod injection;
mod json_output;
mod launch;
mod ledger_store;
mod props;
mod quickstart_ledgers;
mod report;
mod search;
mod slurm;
mod slurm_harness;
mod ssh;
mod ssh_fleet_harness;
mod status_watch;
mod untrusted;
mod verdict;
