//! `tunectl export --format parquet|csv [--samples]`: the study of
//! export_apply.rs (a FAKE trial program whose profile is known: base 100
//! ops/s, fast 200 at n=1 and 90 at n=2, wrong 300 with another output,
//! crash exits 3) as data, read back with the `parquet` crate's own reader,
//! as CSV, and by examples/notebook/analyze.py in pandas and DuckDB.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;

use crate::export_apply::shared;
use crate::support;
use crate::support::env::{Env, Out};

type Row = BTreeMap<String, Field>;

/// A Parquet file's rows by column name, and its `tunectl.data` metadata.
fn read_parquet(path: &Path) -> (Vec<Row>, serde_json::Value) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = SerializedFileReader::new(file).expect("a Parquet file");
    let meta = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == "tunectl.data"))
        .and_then(|k| k.value.clone())
        .expect("tunectl.data metadata");
    let rows = reader
        .get_row_iter(None)
        .expect("rows")
        .map(|r| {
            r.expect("row")
                .get_column_iter()
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect()
        })
        .collect();
    (rows, serde_json::from_str(&meta).expect("metadata JSON"))
}

fn text(row: &Row, col: &str) -> String {
    match &row[col] {
        Field::Str(s) => s.clone(),
        Field::Null => String::new(),
        other => panic!("{col} is {other:?}, not a string"),
    }
}

/// The numbers of a list column (`metric.*`).
fn numbers(row: &Row, col: &str) -> Vec<f64> {
    match &row[col] {
        Field::ListInternal(list) => list
            .elements()
            .iter()
            .map(|f| match f {
                Field::Double(x) => *x,
                other => panic!("{col} holds {other:?}"),
            })
            .collect(),
        other => panic!("{col} is {other:?}, not a list"),
    }
}

/// `export` with `args`, in the shared env; stdout.
fn export(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["export", &env.study_arg(), "--ledger", env.ledger_url()]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    all.extend(args.iter().map(|s| s.to_string()));
    env.tunectl_ok(&all)
}

/// The attempt objects in the ledger (`<study>/trials/<key>/<id>.json`).
fn attempt_objects(env: &Env) -> usize {
    let trials = env.ledger().join("fake-tune").join("trials");
    std::fs::read_dir(&trials)
        .unwrap_or_else(|e| panic!("{}: {e}", trials.display()))
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
        .count()
}

/// The attempts as Parquet, written to a fresh directory; its rows.
fn attempts(env: &Env, name: &str, samples: bool) -> (PathBuf, Vec<Row>, serde_json::Value) {
    let path = env.path().join(name);
    let mut args = vec!["--format", "parquet", "-o"];
    let p = path.display().to_string();
    args.push(&p);
    if samples {
        args.push("--samples");
    }
    let stdout = export(env, &args);
    assert_eq!(stdout.trim(), p, "the path written on stdout");
    let (rows, meta) = read_parquet(&path);
    (path, rows, meta)
}

#[test]
fn parquet_export_has_one_typed_row_per_attempt_with_every_sample() {
    let (env, _) = shared();
    let (_, rows, meta) = attempts(env, "attempts.parquet", false);
    assert_eq!(meta["schema"], "tunectl.data/1");
    assert_eq!(meta["rows"], "attempt");
    assert_eq!(meta["objective"]["name"], "throughput");
    assert_eq!(meta["objective"]["unit"], "ops/s");
    assert_eq!(rows.len(), attempt_objects(env), "every attempt, once");

    for r in &rows {
        let mode = text(r, "knob.mode");
        let Field::Long(n) = r["cell.n"] else {
            panic!("cell.n is an integer column: {:?}", r["cell.n"]);
        };
        assert_eq!(text(r, "study"), "fake-tune");
        assert_eq!(r["counts"], Field::Bool(true), "no attempt ran twice");
        assert_eq!(r["is_baseline"], Field::Bool(mode == "base"));
        match mode.as_str() {
            "crash" => {
                assert_eq!(text(r, "status"), "failed");
                assert_eq!(text(r, "failure_class"), "crash");
                assert_eq!(r["exit_code"], Field::Long(3));
                assert_eq!(text(r, "judged"), "rejected");
                assert_eq!(text(r, "rejection"), "crash");
            }
            "wrong" => {
                assert_eq!(text(r, "status"), "ok");
                assert_eq!(text(r, "judged"), "rejected");
                assert_eq!(text(r, "rejection"), "output_changed");
            }
            "base" | "fast" => {
                assert_eq!(text(r, "status"), "ok");
                assert_eq!(r["rejection"], Field::Null);
                let speed = match (mode.as_str(), n) {
                    ("fast", 1) => 200.0,
                    ("fast", _) => 90.0,
                    _ => 100.0,
                };
                // The fake adds REPEAT / 10 to every sample.
                for x in numbers(r, "metric.throughput") {
                    assert!(
                        (speed..speed + 5.0).contains(&x),
                        "{mode} at n={n}: {x} (expected {speed} + repeat / 10)"
                    );
                }
            }
            other => panic!("unknown mode {other}"),
        }
    }
    // Every mode at both cells, the baseline's anchors among the rows.
    for mode in ["base", "fast", "wrong", "crash"] {
        for n in [1, 2] {
            assert!(
                rows.iter()
                    .any(|r| text(r, "knob.mode") == mode && r["cell.n"] == Field::Long(n)),
                "{mode} at n={n}"
            );
        }
    }
}

#[test]
fn samples_are_one_row_each_and_csv_holds_what_parquet_holds() {
    let (env, _) = shared();
    let (_, attempts, _) = attempts(env, "a.parquet", false);
    let (_, samples, meta) = attempts_with_samples(env);
    assert_eq!(meta["rows"], "sample");
    let in_lists: usize = attempts
        .iter()
        .filter(|r| r["metric.throughput"] != Field::Null)
        .map(|r| numbers(r, "metric.throughput").len())
        .sum();
    let objective: Vec<&Row> = samples
        .iter()
        .filter(|r| r["objective"] == Field::Bool(true))
        .collect();
    assert_eq!(objective.len(), in_lists, "one row per sample");
    for r in &objective {
        assert_eq!(text(r, "metric"), "throughput");
        assert_eq!(text(r, "unit"), "ops/s");
        let Field::Double(v) = r["value"] else {
            panic!("value: {:?}", r["value"]);
        };
        if text(r, "knob.mode") == "fast" && r["cell.n"] == Field::Long(2) {
            assert!((90.0..95.0).contains(&v), "fast at n=2 is slower: {v}");
        }
    }

    // CSV: the same columns and rows, read by a CSV reader.
    let csv = export(env, &["--format", "csv"]);
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(String::from)
        .collect();
    let columns: Vec<&String> = attempts[0].keys().collect();
    let mut sorted = header.clone();
    sorted.sort();
    assert_eq!(sorted.iter().collect::<Vec<_>>(), columns, "same columns");
    let records: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("record")).collect();
    assert_eq!(records.len(), attempts.len(), "same rows");
    let at = |name: &str| header.iter().position(|h| h == name).expect(name);
    let first = &records[0];
    assert_eq!(&first[at("study")], "fake-tune");
    assert_eq!(&first[at("attempt_id")], text(&attempts[0], "attempt_id"));
    assert!(
        first[at("metric.throughput")].starts_with('['),
        "a list as JSON"
    );
}

fn attempts_with_samples(env: &Env) -> (PathBuf, Vec<Row>, serde_json::Value) {
    attempts(env, "s.parquet", true)
}

#[test]
fn data_export_options_are_refused_where_they_do_not_apply() {
    let (env, _) = shared();
    let with_tuned_files = "goes with --format parquet or csv";
    for (args, needle) in [
        (vec!["--samples"], with_tuned_files),
        (vec!["-o", "x.parquet"], with_tuned_files),
        (vec!["--format", "json", "--samples"], with_tuned_files),
        (
            vec!["--format", "parquet", "--out", "d"],
            "--out DIR is where tuned files go",
        ),
    ] {
        let mut all = vec!["export", "--ledger", env.ledger_url()];
        let study = env.study_arg();
        all.push(&study);
        all.extend(args.iter());
        let Out { code, stderr, .. } = env.tunectl_run(&all);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    assert!(!env.path().join("x.parquet").exists());
    assert!(!env.path().join("d").exists());
}

/// examples/notebook/analyze.py in pandas and DuckDB (pinned wheels in
/// `.cache/notebook-venv`, examples/notebook/setup.sh) over the export:
/// it finds the known winner at n=1, the baseline at n=2 (fast is slower
/// there), the gate's two rejections, and draws its PNG.
#[test]
fn the_notebook_example_reads_the_export_in_pandas_and_duckdb() {
    let (env, _) = shared();
    let python = support::example_python("notebook");
    let (a, _, _) = attempts(env, "nb-attempts.parquet", false);
    let (s, _, _) = attempts(env, "nb-samples.parquet", true);
    let png = env.path().join("nb.png");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/notebook/analyze.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(&a)
        .arg(&s)
        .arg("--plot")
        .arg(&png)
        .current_dir(env.path())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("objective throughput in ops/s, higher is better"),
        "{stdout}"
    );
    let sections: Vec<&str> = stdout.split("\n\n").collect();
    let section = |cell: &str| {
        sections
            .iter()
            .find(|s| s.lines().next().is_some_and(|l| l.contains(cell)))
            .unwrap_or_else(|| panic!("no section for {cell}:\n{stdout}"))
    };
    assert!(
        section("n=1").contains("fastest by median: mode=fast"),
        "{stdout}"
    );
    assert!(
        section("n=2").contains("fastest by median: baseline"),
        "{stdout}"
    );
    // fast is 2× the baseline at n=1: the ratio of medians and its
    // interval say so, with n.
    let fast = section("n=1")
        .lines()
        .find(|l| l.trim_start().starts_with("mode=fast:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(fast.contains("1.99") || fast.contains("2.00"), "{fast}");
    assert!(
        fast.contains("(n=") && fast.contains("bootstrap 95%"),
        "{fast}"
    );
    assert!(stdout.contains("knob.mode=crash: crash 1"), "{stdout}");
    assert!(
        stdout.contains("knob.mode=wrong: output_changed 1"),
        "{stdout}"
    );
    let bytes = std::fs::read(&png).expect("the plot");
    assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
}
