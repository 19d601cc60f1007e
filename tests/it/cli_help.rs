//! `--help` says what every command and argument is for, with examples
//! and exit codes: checked on clap's command tree, and through the binary.

use clap::CommandFactory;
use tunectl::cli::Cli;

use crate::support;

/// Every subcommand (at any depth) and every argument of `cmd` without
/// help text, named by their path (`tunectl launch --ledger`).
fn without_help(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            out.push(format!("{path} {}", arg.get_id()));
        }
    }
    for sub in cmd.get_subcommands() {
        let sub_path = format!("{path} {}", sub.get_name());
        // clap's own `help` subcommand has its help.
        if sub.get_about().is_none() && sub.get_long_about().is_none() {
            out.push(sub_path.clone());
        }
        without_help(sub, &sub_path, out);
    }
}

#[test]
fn every_command_and_argument_has_help() {
    let mut cmd = Cli::command();
    // Build it as clap does before parsing, so that the `help` and
    // `version` arguments it adds are walked too.
    cmd.build();
    let mut missing = Vec::new();
    without_help(&cmd, "tunectl", &mut missing);
    assert!(
        missing.is_empty(),
        "without help text:\n  {}",
        missing.join("\n  ")
    );
}

/// The leaves of the tree: what a user runs (`ledger check`, not `ledger`).
fn runnable(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
    let subs: Vec<&clap::Command> = cmd
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .collect();
    if subs.is_empty() {
        out.push(path);
        return;
    }
    for s in subs {
        let mut p = path.clone();
        p.push(s.get_name().to_string());
        runnable(s, p, out);
    }
}

#[test]
fn every_command_help_shows_examples_and_exit_codes() {
    let mut commands = Vec::new();
    runnable(&Cli::command(), Vec::new(), &mut commands);
    assert!(
        commands.contains(&vec!["ledger".to_string(), "check".to_string()]),
        "{commands:?}"
    );
    commands.push(Vec::new());
    for path in commands {
        for flag in ["-h", "--help"] {
            let out = support::env::tunectl_command()
                .args(&path)
                .arg(flag)
                .output()
                .expect("run");
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(0), "{path:?} {flag}");
            assert!(
                text.contains("\nExamples:\n  tunectl "),
                "{path:?} {flag}: no examples:\n{text}"
            );
            assert!(
                text.contains("\nExit codes: "),
                "{path:?} {flag}: no exit codes:\n{text}"
            );
        }
    }
}

/// Help names no internal path (`report::html`), and every command that
/// prints for people takes `--format text` (`report` calls it `table`).
#[test]
fn help_names_no_internal_path_and_text_is_a_format_everywhere() {
    let mut root = Cli::command();
    let mut paths = Vec::new();
    runnable(&root, Vec::new(), &mut paths);
    let path = regex::Regex::new(r"\b[a-z_]+::[a-z_]+").expect("regex");
    for p in &paths {
        let mut cmd = &mut root;
        for name in p {
            cmd = cmd.find_subcommand_mut(name).expect("subcommand");
        }
        let help = cmd.render_long_help().to_string();
        assert!(
            !path.is_match(&help),
            "`tunectl {}` help names an internal path:\n{help}",
            p.join(" ")
        );
        if let Some(format) = cmd.get_arguments().find(|a| a.get_id() == "format") {
            let takes_text = format
                .get_possible_values()
                .iter()
                .any(|v| v.matches("text", false));
            assert!(
                takes_text,
                "`tunectl {} --format text` is refused",
                p.join(" ")
            );
        }
    }
}

#[test]
fn quiet_and_verbose_are_global_flags() {
    let cmd = Cli::command();
    for id in ["quiet", "verbose"] {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == id)
            .unwrap_or_else(|| panic!("no --{id}"));
        assert!(arg.is_global_set(), "--{id} is not global");
    }
}

/// `tunectl man | head` and the like: a reader that leaves early is no
/// error (nothing on stderr, exit 0); a stdout that cannot be written (a
/// full disk) is one, named, with exit 1.
#[test]
fn a_closed_pipe_is_quiet_and_a_full_disk_is_an_error() {
    for args in [&["man"][..], &["completions", "bash"], &["--help"]] {
        // The read end is closed before tunectl writes a byte.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = support::env::tunectl_command()
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run tunectl");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // clap's own --help exits 0 on a closed pipe as well.
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("Broken pipe") && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return;
    };
    let out = support::env::tunectl_command()
        .arg("man")
        .stdout(full)
        .output()
        .expect("run tunectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
}
