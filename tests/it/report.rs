//! What `tunectl report` shows people: the terminal report at a fixed
//! width (what ships first, rejections grouped by cause, "what to try
//! next"), secondary metrics in every format, and unknown spreads shown as
//! unknown.
//!
//! The study is [`KERNEL`], run by the FAKE bench [`KERNEL_BENCH`] (a
//! known profile, nothing measured).

use serde_json::Value as Json;

use crate::support::env::Env;

/// Three knobs over two cells: `block` and `threads` change the speed,
/// `accum=i32` crashes, `accum=f32` changes the output; `threads=8` is
/// kept out by a constraint. A secondary metric, `chunk_us`.
const KERNEL: &str = r#"name: kernel
knobs:
  block: {kind: int, values: [1024, 4096, 16384], default: 4096}
  accum: {kind: categorical, values: [f64, f32, i32], default: f64}
  threads: {kind: int, values: [1, 2, 4, 8], default: 1}
constraints:
  - "threads < 8"
cells:
  n: [1, 2]
trial:
  command: "sh {{ study_dir }}/bench.sh {{ block }} {{ accum }} {{ threads }} {{ n }}"
  timeout: 20s
objective: {metric: throughput, unit: ops/s, better: higher}
metrics:
  - {name: chunk_us, unit: us, better: lower}
measurement: {warmup: 0, repeats: REPEATS, anchor_every: 0, confirm_repeats: CONFIRM}
gate: {outputs: [out.txt]}
"#;

/// The FAKE bench of [`KERNEL`]: `sh bench.sh BLOCK ACCUM THREADS N`.
/// Throughput 100 × (0.8, 1, 1.5 for block 1024, 4096, 16384) × (1, 1.1,
/// 1.15 for 1, 2, 4 threads) + repeat / 10; chunk_us 1000 / that. `i32`
/// panics (exit 101), `f32` writes another output.
const KERNEL_BENCH: &str = r#"block=$1 accum=$2 threads=$3 n=$4
if [ "$accum" = i32 ]; then
  echo "thread 'main' panicked at src/sum.rs:42:9: attempt to add with overflow" >&2
  exit 101
fi
if [ "$accum" = f32 ]; then echo "sum($n) = $((n * 7)).000001" > out.txt
else echo "sum($n) = $((n * 7))" > out.txt; fi
awk -v b="$block" -v t="$threads" -v r="${TUNECTL_REPEAT:-0}" 'BEGIN {
  fb = (b == 1024) ? 0.8 : (b == 4096) ? 1 : 1.5
  ft = (t == 1) ? 1 : (t == 2) ? 1.1 : 1.15
  tp = 100 * fb * ft + r / 10
  printf "{\"metrics\": {\"throughput\": [%.4f], \"chunk_us\": [%.4f]}}\n", tp, 1000 / tp
}' > "$TUNECTL_RESULT"
"#;

/// [`KERNEL`] with `repeats` sweep repeats and `confirm` confirmation
/// repeats, launched to its end.
fn kernel(repeats: u32, confirm: u32) -> Env {
    let study = KERNEL
        .replace("REPEATS", &repeats.to_string())
        .replace("CONFIRM", &confirm.to_string());
    let env = Env::new(&study);
    env.write("study/bench.sh", KERNEL_BENCH);
    env.launch_ok(&[]);
    env
}

/// `tunectl report` of the study with `extra` arguments; its stdout.
fn report(env: &Env, extra: &[&str]) -> String {
    let mut args = vec![
        "report".to_string(),
        env.study_arg(),
        "--ledger".to_string(),
        env.ledger_url().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    env.tunectl_ok(&args)
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// The terminal report at 80 columns: what ships leads, every line fits,
/// rejections are grouped, and it ends with what to try next.
#[test]
fn terminal_report_at_80_columns() {
    let env = kernel(3, 3);
    let table = report(&env, &["--width", "80"]);
    assert!(widest(&table) <= 80, "a line is wider than 80:\n{table}");
    let ships = table.find("WHAT SHIPS").expect("what ships");
    let evidence = table.find("EVIDENCE on").expect("evidence");
    let next = table.find("WHAT TO TRY NEXT").expect("next");
    assert!(ships < evidence && evidence < next, "{table}");
    // The fake's knobs move the objective by known amounts.
    assert!(
        table.contains("ships block=16384 threads=4 · VERDICT"),
        "{table}"
    );
    insta::with_settings!({filters => vec![
        (r"hc-[0-9a-f]{12}", "[CLASS]"),
        (r"(host class \[CLASS\] · 1 host: local\n)(  .*\n)+", "$1  [LABEL]\n"),
        (r"tunectl \d+\.\d+\.\d+", "tunectl [VERSION]"),
        (r"spec [0-9a-f]{12}", "spec [SPEC]"),
    ]}, {
        insta::assert_snapshot!("kernel_report_80", table);
    });
}

/// Without `--width`, a report that is not on a terminal is 100 columns
/// wide, or `COLUMNS` wide.
#[test]
fn width_defaults_to_100_and_honours_columns() {
    let env = kernel(3, 0);
    let plain = report(&env, &[]);
    let w = widest(&plain);
    assert!(w <= 100 && w > 80, "widest line {w}:\n{plain}");
    let mut c = env.tunectl();
    c.args(["report", &env.study_arg(), "--ledger", env.ledger_url()])
        .env("COLUMNS", "60");
    let narrow = env.run(c);
    assert_eq!(narrow.code, Some(0), "{}", narrow.text());
    assert!(widest(&narrow.stdout) <= 60, "{}", narrow.stdout);
    let out = env.tunectl_run(&["report", &env.study_arg(), "--width", "10"]);
    assert_eq!(out.code, Some(2), "{}", out.text());
}

/// Rejections that fail the same way are one line, with the knob values
/// all of them share; `--all` lists each config at each cell instead.
#[test]
fn rejections_group_by_cause_and_all_lists_them() {
    let env = kernel(3, 0);
    let table = report(&env, &["--width", "100"]);
    let crash = table
        .lines()
        .find(|l| l.starts_with("- accum=i32: crash at every cell"))
        .unwrap_or_else(|| panic!("no crash group:\n{table}"));
    assert!(
        crash.contains("9 configs (every one tried with accum=i32)"),
        "{crash}"
    );
    assert!(table.contains("exit code 101"), "{table}");
    assert!(
        table.contains("- accum=f32: output_changed at every cell, 9 configs"),
        "{table}"
    );
    assert!(!table.contains("│ rejected"), "{table}");
    let all = report(&env, &["--width", "80", "--all"]);
    assert!(widest(&all) <= 80, "a line is wider than 80:\n{all}");
    let rows = all.lines().filter(|l| l.starts_with("│ rejected")).count();
    // 18 rejected configs at each of 2 cells.
    assert_eq!(rows, 36, "{all}");
    assert!(!all.contains("- accum=i32: crash"), "{all}");
}

/// With fewer samples than selection.min_samples, spreads are unknown in
/// every format: `± ?` in the table and Markdown, an empty field in CSV,
/// `null` in JSON, never 0.
#[test]
fn unknown_spreads_are_unknown_in_every_format() {
    let env = kernel(2, 0);
    let table = report(&env, &["--width", "100"]);
    assert!(table.contains("± ?"), "{table}");
    assert!(!table.contains("± 0 "), "{table}");
    let md = report(&env, &["--format", "markdown"]);
    assert!(md.contains("± ?"), "{md}");
    assert!(!md.contains("± 0 "), "{md}");
    let csv = report(&env, &["--format", "csv"]);
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let headers = rows.headers().expect("headers").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect(name);
    let mut seen = 0;
    for row in rows.records() {
        let row = row.expect("row");
        if row[col("n")].is_empty() || &row[col("n")] == "0" {
            continue;
        }
        seen += 1;
        assert_eq!(&row[col("spread")], "", "{row:?}");
        assert_eq!(&row[col("relative_spread")], "", "{row:?}");
    }
    assert!(seen > 0, "{csv}");
    let json: Json = serde_json::from_str(&report(&env, &["--format", "json"])).expect("json");
    let base = &json["classes"][0]["cells"][0]["baseline"];
    assert_eq!(base["summary"]["n"], 2, "{base}");
    assert!(base["summary"]["spread"].is_null(), "{base}");
    assert!(base["metrics"]["chunk_us"]["spread"].is_null(), "{base}");
}

/// Every secondary metric sits beside the objective, with its own n and
/// spread: a column of the table and the Markdown, rows of the CSV.
#[test]
fn secondary_metrics_in_table_markdown_and_csv() {
    let env = kernel(3, 0);
    let table = report(&env, &["--width", "120"]);
    assert!(table.contains("chunk_us [us]"), "{table}");
    // The baseline's chunk_us: 1000/100, 1000/100.1, 1000/100.2.
    assert!(table.contains("9.990 ± 0.015 n=3"), "{table}");
    let md = report(&env, &["--format", "markdown"]);
    assert!(md.contains("| chunk_us median ± spread (n) |"), "{md}");
    assert!(md.contains("9.990 ± 0.015 us (0.15%) n=3"), "{md}");
    let csv = report(&env, &["--format", "csv"]);
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let headers = rows.headers().expect("headers").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect(name);
    let base: Vec<_> = rows
        .records()
        .map(|r| r.expect("row"))
        .filter(|r| &r[col("role")] == "baseline" && &r[col("cell")] == "n=1")
        .collect();
    let metrics: Vec<&str> = base.iter().map(|r| &r[col("metric")]).collect();
    assert_eq!(metrics, ["throughput", "chunk_us"]);
    let chunk = &base[1];
    assert_eq!(&chunk[col("unit")], "us");
    assert_eq!(&chunk[col("better")], "lower");
    assert_eq!(&chunk[col("n")], "3");
    assert_eq!(&chunk[col("speedup_vs_baseline")], "");
    let spread: f64 = chunk[col("spread")].parse().expect("a spread");
    assert!(spread > 0.0, "{chunk:?}");
}

/// "What to try next" ranks the knobs by their paired effect, with n and
/// spread, names a winner at the edge of a knob's range, and the values a
/// constraint kept out; JSON has the same as data.
#[test]
fn next_levers_in_table_markdown_and_json() {
    let env = kernel(3, 0);
    let json: Json = serde_json::from_str(&report(&env, &["--format", "json"])).expect("json");
    let next = &json["classes"][0]["next"];
    let effects = next["effects"].as_array().expect("effects");
    let knobs: Vec<&str> = effects.iter().filter_map(|e| e["knob"].as_str()).collect();
    // block (1.5 / 0.8) moves throughput more than threads (1.15 / 1);
    // accum has one value that passed the gate.
    assert_eq!(knobs, ["block", "threads", "accum"], "{next:#}");
    let block = &effects[0];
    assert_eq!(block["best"], 16384);
    assert_eq!(block["worst"], 1024);
    // 3 threads × 2 cells, every pair at 1.875 but for the repeats' offsets.
    assert_eq!(block["pairs"], 6);
    let ratio = block["ratio"].as_f64().expect("ratio");
    assert!((ratio - 1.875).abs() < 0.01, "{block}");
    assert!(block["spread"].as_f64().is_some(), "{block}");
    assert!(effects[2]["ratio"].is_null(), "{next:#}");
    let edges = next["edges"].as_array().expect("edges");
    assert!(
        edges
            .iter()
            .any(|e| e["knob"] == "block" && e["side"] == "largest" && e["edge_of_range"] == true),
        "{next:#}"
    );
    assert!(
        edges
            .iter()
            .any(|e| e["knob"] == "threads" && e["edge_of_range"] == false),
        "{next:#}"
    );
    let untried = next["untried"].as_array().expect("untried");
    assert_eq!(untried.len(), 1, "{next:#}");
    assert_eq!(untried[0]["knob"], "threads");
    assert_eq!(untried[0]["values"], serde_json::json!([8]));
    assert_eq!(untried[0]["possible_causes"][0], "constraint");

    let table = report(&env, &["--width", "200"]);
    let at = table.find("WHAT TO TRY NEXT").expect("next section");
    let tail = &table[at..];
    assert!(tail.contains("- block: 16384 vs 1024: 1.87"), "{tail}");
    assert!(tail.contains("(n=6 pairs)"), "{tail}");
    assert!(
        tail.contains(
            "- block=16384 ships in n ∈ [1, 2) and n ∈ [2, 4), the largest value of the range of block"
        ),
        "{tail}"
    );
    assert!(
        tail.contains("- threads=4 ships in n ∈ [1, 2) and n ∈ [2, 4), the largest value of threads tried: larger values of its range were never tried"),
        "{tail}"
    );
    // Every planned trial ended: only the constraint and the budget can
    // have kept threads=8 out.
    assert!(
        tail.contains("- never tried: threads=8 (possible causes: a constraint names the knob; budget.max_trials may have cut the grid)\n"),
        "{tail}"
    );
    let md = report(&env, &["--format", "markdown"]);
    assert!(md.contains("## what to try next on hc-"), "{md}");
    assert!(md.contains("- never tried: threads=8"), "{md}");
}
