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

/// `tunectl man --out DIR` writes a page per command, subcommands of
/// subcommands included, each titled with its command and listing every
/// long flag the command takes; it lists the pages on stdout.
#[test]
fn man_out_writes_a_page_per_command_with_its_flags() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("man1");
    let out = support::env::tunectl_command()
        .args(["man", "--out"])
        .arg(&dir)
        .output()
        .expect("run tunectl man --out");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    // Every command of the tree, at any depth: `tunectl`, `tunectl launch`,
    // `tunectl ledger check`, ...
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut commands: Vec<(String, clap::Command)> = Vec::new();
    let mut stack = vec![("tunectl".to_string(), cmd)];
    while let Some((name, c)) = stack.pop() {
        for sub in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            stack.push((format!("{name}-{}", sub.get_name()), sub.clone()));
        }
        commands.push((name, c));
    }
    assert_eq!(listed.len(), commands.len(), "{listed:?}");
    for (name, c) in &commands {
        let path = dir.join(format!("{name}.1"));
        assert!(
            listed.contains(&path.display().to_string()),
            "{name}: not listed in {listed:?}"
        );
        let page =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(page.contains(&format!(".TH {name} 1")), "{name}: {page}");
        for arg in c.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                // roff writes `-` as `\-`.
                let flag = format!("\\-\\-{}", long.replace('-', "\\-"));
                assert!(page.contains(&flag), "{name}: no --{long} in its page");
            }
        }
    }
    assert!(
        commands.iter().any(|(n, _)| n == "tunectl-ledger-check"),
        "{commands:?}",
        commands = commands.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
}

/// The docs name the binary's flags and only those: every long flag of
/// every command's `--help` is in docs/cli.md, and every `--flag` that
/// docs/cli.md or the README writes is one of tunectl's, but for the
/// flags of other programs they show (listed here with whose they are).
#[test]
fn the_docs_and_help_name_the_same_flags() {
    const OTHERS: [(&str, &str); 10] = [
        ("batch", "the README's example program's own flag"),
        ("accum", "a trial program's own flag in an example command"),
        ("block", "a trial program's own flag in an example command"),
        ("dtype", "a trial program's own flag in an example command"),
        (
            "threads",
            "a trial program's own flag in an example command",
        ),
        ("n", "a trial program's own flag in an example command"),
        ("export-json", "hyperfine's"),
        ("all-targets", "cargo's"),
        ("check", "cargo fmt's"),
        ("test", "a script's (scripts/test.sh --test)"),
    ];
    let flag = regex::Regex::new(r"(?:^|[^\w-])--([a-z][a-z0-9-]*)").expect("regex");
    let mut cmd = Cli::command();
    cmd.build();
    let mut paths: Vec<Vec<String>> = Vec::new();
    let mut stack = vec![(Vec::new(), cmd)];
    while let Some((path, c)) = stack.pop() {
        for sub in c.get_subcommands().filter(|s| s.get_name() != "help") {
            let mut p = path.clone();
            p.push(sub.get_name().to_string());
            stack.push((p, sub.clone()));
        }
        paths.push(path);
    }
    let mut in_help = std::collections::BTreeSet::new();
    for path in &paths {
        let out = support::env::tunectl_command()
            .args(path)
            .arg("--help")
            .output()
            .expect("run tunectl --help");
        assert!(out.status.success(), "{path:?} --help");
        for c in flag.captures_iter(&String::from_utf8_lossy(&out.stdout)) {
            in_help.insert(c[1].to_string());
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read =
        |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let cli_md = read("docs/cli.md");
    let documented: std::collections::BTreeSet<String> = flag
        .captures_iter(&cli_md)
        .map(|c| c[1].to_string())
        .collect();
    let undocumented: Vec<&String> = in_help
        .iter()
        .filter(|f| !documented.contains(*f) && !["help", "version"].contains(&f.as_str()))
        .collect();
    assert!(
        undocumented.is_empty(),
        "flags of --help that docs/cli.md never names: {undocumented:?}"
    );
    for (file, text) in [
        ("docs/cli.md", cli_md.clone()),
        ("README.md", read("README.md")),
    ] {
        let unknown: Vec<String> = flag
            .captures_iter(&text)
            .map(|c| c[1].to_string())
            .filter(|f| !in_help.contains(f) && !OTHERS.iter().any(|(o, _)| o == f))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} names flags tunectl does not have: {unknown:?}"
        );
    }
}
