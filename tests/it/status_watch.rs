//! `tunectl status --watch` beside a real local launch of the FAKE trial
//! program (tests/it/support/fake.rs) in the same ledger: on a terminal (a
//! pseudo-terminal from util-linux `script`) and with stdout a file.

use std::time::Duration;

use crate::support;
use crate::support::env::{Env, Running};
use crate::support::wait_for;

/// 3 configs × 3 repeats at one cell, each measured run sleeping 0.5 s
/// (about 5 s in all on one slot), then a confirmation round of the winner
/// (`fast`, 2× the baseline) against the baseline, two pairs: 13 trials.
/// Five samples a trial, so a spread is known after the first.
const STUDY: &str = r#"name: watched
knobs:
  mode: {kind: categorical, values: [base, fast, slow], default: base}
cells:
  n: [1]
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} {{ n }}"
  timeout: 20s
  env: {FAKE_SLEEP: "0.5", FAKE_SAMPLES: "5", FAKE_NOISE: "0.01"}
objective: {metric: throughput, unit: ops/s, better: higher}
measurement: {warmup: 0, repeats: 3, anchor_every: 0, confirm_repeats: 1}
"#;

// The final round takes two pairs: `confirm_repeats: 1` is its least, but
// an interval needs two runs a side.
const TRIALS: usize = 3 * 3 + 2 * 2;

fn attempts(env: &Env) -> usize {
    env.attempts("watched").values().map(Vec::len).sum()
}

/// Start the launch and wait (bounded) until its first trial is recorded,
/// so that the watch finds the study and something to time.
fn launch_started(env: &Env) -> Running {
    let mut launch = env.spawn(env.launch_cmd(&[]));
    if !wait_for(Duration::from_secs(60), || attempts(env) >= 1) {
        let _ = launch.child.kill();
        panic!("the launch recorded no attempt within 60 s");
    }
    launch
}

/// The launch ends with every bucket a VERDICT, all its trials recorded.
fn launch_finished(env: &Env, launch: Running) {
    let out = env.finish(launch);
    assert_eq!(out.code, Some(0), "launch:\n{}", out.text());
    assert_eq!(attempts(env), TRIALS);
}

/// `s` with a single-quoted shell word for each of `words`.
fn shell_words(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn on_a_terminal_the_watch_refreshes_in_place_and_ends_with_the_launch() {
    let env = Env::new(STUDY);
    let launch = launch_started(&env);
    // util-linux `script` runs the watch on a pseudo-terminal of 80
    // columns and copies what it draws, escapes and all, to its stdout.
    let inner = format!(
        "stty cols 80 rows 40; exec {}",
        shell_words(&[
            env!("CARGO_BIN_EXE_tunectl"),
            "status",
            &env.study_arg(),
            "--watch",
            "--interval",
            "300ms",
            "--ledger",
            env.ledger_url(),
        ])
    );
    let mut script = env.command("script");
    script
        .args(["-qfec", &inner, "/dev/null"])
        .env("TERM", "xterm");
    let watch = env.finish(env.spawn(script));
    // The watch ends by itself, once the launch has nothing running or
    // pending: by then every trial, the confirmation round's too, is in.
    assert_eq!(watch.code, Some(0), "watch:\n{}", watch.text());
    assert_eq!(
        attempts(&env),
        TRIALS,
        "the watch ended before the launch:\n{}",
        watch.text()
    );
    launch_finished(&env, launch);

    let raw = &watch.stdout;
    let cursor_up = regex::Regex::new(r"\x1b\[\d*A").expect("regex");
    assert!(
        cursor_up.is_match(raw) && raw.contains('\r'),
        "no redraw in place (cursor up, carriage return):\n{raw:?}"
    );
    // What the terminal shows: indicatif pads each line to the terminal's
    // 80 columns and lets the terminal wrap, so the rows are the text
    // between escapes cut every 80 columns. No row reaches the last column
    // (the watch wrapped its long lines at spaces, one column short), so
    // the terminal broke no word.
    let escapes = regex::Regex::new(r"\x1b\[[0-9;?]*[A-Za-z]|\r").expect("regex");
    let mut rows: Vec<String> = Vec::new();
    for piece in escapes.split(raw).filter(|p| !p.is_empty()) {
        let (mut row, mut width) = (String::new(), 0);
        for c in piece.chars() {
            if c == '\n' {
                rows.push(std::mem::take(&mut row));
                width = 0;
                continue;
            }
            row.push(c);
            width += console::measure_text_width(c.encode_utf8(&mut [0; 4]));
            if width >= 80 {
                assert!(
                    row.ends_with(' '),
                    "a line reached the terminal's edge (a word broken there): {row:?}"
                );
                rows.push(std::mem::take(&mut row));
                width = 0;
            }
        }
        if !row.is_empty() {
            rows.push(row);
        }
    }
    let shown: String = rows
        .iter()
        .map(|r| r.trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    // Long lines were wrapped, with an indented continuation; read them
    // joined again.
    let continued = regex::Regex::new(r"\n {4,}").expect("regex");
    assert!(continued.is_match(&shown), "nothing wrapped:\n{shown}");
    let screen = &continued.replace_all(&shown, " ").into_owned();
    // The counts, and an ETA from the run times so far.
    let counts = regex::Regex::new(
        r"done \d · failed 0 · running 1 · pending \d · ETA ~\d+s \(\d trials? left on 1 slot, ",
    )
    .expect("regex");
    assert!(counts.is_match(screen), "no counts with an ETA:\n{screen}");
    // What runs now: which config, at which cell, on which host, how long.
    let running = regex::Regex::new(
        r"running now: (sweep|confirm) (baseline|mode=\w+) @ n=\d+ on local for \d+\.\ds",
    )
    .expect("regex");
    assert!(
        running.is_match(screen),
        "nothing said running now:\n{screen}"
    );
    // While it runs, the leader is a DRAFT with its speedup, n and interval.
    let draft = regex::Regex::new(
        r"bucket [^:]+: DRAFT \(.+?\) · leader mode=fast: [12]\.\d{3}× the baseline \(n=\d+ vs \d+ of the baseline, [12]\.\d{3}× \[[12]\.\d{3}, [12]\.\d{3}\] 95% CI\)",
    )
    .expect("regex");
    assert!(draft.is_match(screen), "no DRAFT leader:\n{screen}");
    // The last view: everything done, the confirmed winner a VERDICT.
    assert!(
        screen.contains("done 9 · failed 0 · running 0 · pending 0 · nothing left to run"),
        "{screen}"
    );
    assert!(screen.contains(": VERDICT ("), "{screen}");
    assert!(
        screen.contains("nothing is running or pending: stopped watching"),
        "{screen}"
    );
}

#[test]
fn without_a_terminal_the_watch_prints_a_block_per_change_and_ends_with_the_launch() {
    let env = Env::new(STUDY);
    let launch = launch_started(&env);
    let mut cmd = env.tunectl();
    cmd.args([
        "status",
        &env.study_arg(),
        "--watch",
        "--interval",
        "100ms",
        "--ledger",
        env.ledger_url(),
    ]);
    let watch = env.run(cmd);
    assert_eq!(watch.code, Some(0), "watch:\n{}", watch.text());
    assert_eq!(attempts(&env), TRIALS, "the watch ended before the launch");
    launch_finished(&env, launch);

    let out = &watch.stdout;
    assert!(
        !out.contains('\x1b') && !out.contains('\r'),
        "terminal control in plain output:\n{out:?}"
    );
    assert!(
        out.starts_with("study watched · objective throughput (ops/s, higher is better)"),
        "{out}"
    );
    // One block per refresh that changed something: never the same block
    // twice in a row, however many refreshes the launch took.
    let blocks: Vec<&str> = out.split("-- ").skip(1).collect();
    assert!(blocks.len() >= 2, "{out}");
    let bodies: Vec<&str> = blocks
        .iter()
        .map(|b| b.split_once('\n').map(|(_, body)| body).unwrap_or(""))
        .collect();
    for pair in bodies.windows(2) {
        assert_ne!(pair[0], pair[1], "a block repeated:\n{out}");
    }
    assert!(out.contains("ETA ~"), "{out}");
    assert!(out.contains(": DRAFT ("), "{out}");
    assert!(
        !bodies[..bodies.len() - 1]
            .iter()
            .any(|b| b.contains("VERDICT")),
        "a VERDICT while running:\n{out}"
    );
    let last = bodies[bodies.len() - 1];
    assert!(
        last.contains("running 0 · pending 0 · nothing left to run"),
        "{out}"
    );
    assert!(
        last.contains(": VERDICT (") && last.contains("leader mode=fast"),
        "{out}"
    );
    assert!(
        watch
            .stderr
            .contains("nothing is running or pending: stopped watching"),
        "{}",
        watch.text()
    );
}

/// With a study id there is no pending count: only the launch's open
/// ledger log tells a pause between two trials (here, around its drift
/// anchors) from its end.
#[test]
fn by_study_id_the_watch_outlasts_the_pauses_between_trials() {
    let env = Env::new(&STUDY.replace("anchor_every: 0", "anchor_every: 1"));
    let launch = launch_started(&env);
    let mut cmd = env.tunectl();
    cmd.args([
        "status",
        "watched",
        "--watch",
        "--interval",
        "100ms",
        "--ledger",
        env.ledger_url(),
    ]);
    let watch = env.run(cmd);
    assert_eq!(watch.code, Some(0), "watch:\n{}", watch.text());
    let at_the_end = attempts(&env);
    let out = env.finish(launch);
    assert_eq!(out.code, Some(0), "launch:\n{}", out.text());
    assert_eq!(
        attempts(&env),
        at_the_end,
        "the watch ended before the launch:\n{}",
        watch.text()
    );
    let out = &watch.stdout;
    assert!(
        out.contains(
            "pending ? · ETA unknown (the pending trials are not known: give the study file)"
        ),
        "{out}"
    );
    // Pauses: nothing ran at some refreshes before the end.
    let paused = out.split("-- ").filter(|b| b.contains("running 0")).count();
    assert!(paused >= 2, "no pause between trials seen:\n{out}");
}

/// `status --watch` for its first refreshes (1.5 s at 200 ms), then
/// Ctrl-C.
fn watch_briefly(env: &Env) -> support::env::Out {
    let mut cmd = env.tunectl();
    cmd.args([
        "status",
        &env.study_arg(),
        "--watch",
        "--interval",
        "200ms",
        "--ledger",
        env.ledger_url(),
    ]);
    let watch = env.spawn(cmd);
    std::thread::sleep(Duration::from_millis(1500));
    watch.signal(libc::SIGINT);
    env.finish(watch)
}

#[test]
fn ctrl_c_ends_the_watch_with_exit_0_and_the_launch_goes_on() {
    let env = Env::new(&STUDY.replace(r#"FAKE_SLEEP: "0.5""#, r#"FAKE_SLEEP: "30""#));
    let mut launch = env.spawn(env.launch_cmd(&[]));
    let marker = env.study_dir().join("sleeping");
    if !wait_for(Duration::from_secs(60), || marker.exists()) {
        let _ = env.finish(launch);
        panic!("the first trial never started");
    }
    // Its first refreshes, then Ctrl-C: the trial still sleeps.
    let out = watch_briefly(&env);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stdout.contains("running 1 · pending 8"),
        "{}",
        out.text()
    );
    assert!(
        out.stderr.contains("stopped watching; the study goes on"),
        "{}",
        out.text()
    );
    // The launch did not notice.
    assert!(
        launch.child.try_wait().expect("wait").is_none(),
        "the launch stopped with the watch"
    );
    launch.signal(libc::SIGINT);
    let out = env.finish(launch);
    assert_eq!(out.code, Some(130), "{}", out.text());
    // The study is interrupted: trials wait and no launch runs them. The
    // watch says so and goes on (a launch may resume the study).
    let out = watch_briefly(&env);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(
        out.stdout.contains("running 0 · pending 9")
            && out.stdout.contains("no launch is running this study"),
        "{}",
        out.text()
    );
}

#[test]
fn the_watch_is_refused_with_json_and_the_interval_needs_it() {
    let env = Env::new(STUDY);
    let out = env.tunectl_run(&["status", &env.study_arg(), "--watch", "--json"]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = env.tunectl_run(&["status", &env.study_arg(), "--watch", "--format", "json"]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(out.stderr.contains("give one of them"), "{}", out.text());
    let out = env.tunectl_run(&["status", &env.study_arg(), "--interval", "1s"]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    let out = env.tunectl_run(&["status", &env.study_arg(), "--watch", "--interval", "10ms"]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(out.stderr.contains("shorter than 100ms"), "{}", out.text());
}
