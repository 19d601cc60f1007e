//! Extraction from every kind of source, and from each preset's file as its
//! tool writes it (trimmed documents with the tools' real field names).

use super::*;
use crate::spec::result::{JsonPath, preset};

fn source(from: Source, scale: Option<f64>) -> MetricSource {
    MetricSource { from, scale }
}

fn json(file: &str, path: &str) -> Source {
    Source::Json {
        file: file.into(),
        path: JsonPath::parse(path).expect("path"),
    }
}

fn spec(metrics: &[(&str, MetricSource)]) -> ResultSpec {
    ResultSpec {
        preset: None,
        metrics: metrics
            .iter()
            .map(|(n, s)| (n.to_string(), s.clone()))
            .collect(),
    }
}

fn fetched(items: &[(&str, &str)]) -> Fetched {
    items
        .iter()
        .map(|(n, b)| (n.to_string(), Ok(b.as_bytes().to_vec())))
        .collect()
}

/// Extract one metric `m` from `files` and `streams`.
fn one(
    s: MetricSource,
    files: &[(&str, &str)],
    streams: &[(&str, &str)],
) -> Result<Vec<f64>, String> {
    extract(&spec(&[("m", s)]), &fetched(files), &fetched(streams))
        .map(|mut m| m.remove("m").unwrap_or_default())
        .map_err(|e| e.to_string())
}

#[test]
fn stdout_and_stderr_by_regex() {
    let out = "warming up\ntok/s: 812.5\ntok/s: 815\nnoise tok/s:  809.25 \n";
    let re = |r: &str| source(Source::Stdout { regex: r.into() }, None);
    assert_eq!(
        one(re(r"tok/s:\s*([0-9.]+)"), &[], &[("stdout", out)]),
        Ok(vec![812.5, 815.0, 809.25])
    );
    assert_eq!(
        one(
            re(r"tok/s: ([0-9.]+)"),
            &[],
            &[("stdout", "nothing here\n")]
        ),
        Err("result.m: stdout: no match for 'tok/s: ([0-9.]+)'".to_string())
    );
    assert_eq!(
        one(re(r"t=(\S+)"), &[], &[("stdout", "t=fast\n")]),
        Err("result.m: stdout: 'fast' matched by 't=(\\S+)' is not a number".to_string())
    );
    // stderr, scaled from seconds to milliseconds.
    let s = source(
        Source::Stderr {
            regex: r"took ([0-9.]+) s".into(),
        },
        Some(1000.0),
    );
    assert_eq!(
        one(s.clone(), &[], &[("stderr", "took 0.25 s\ntook 0.5 s\n")]),
        Ok(vec![250.0, 500.0])
    );
    // A stream that did not come back says why.
    let over: Fetched = [(
        "stderr".to_string(),
        Err(FileError::TooLarge {
            bytes: 9_000_000,
            limit: 8 * 1024 * 1024,
        }),
    )]
    .into();
    assert_eq!(
        extract(&spec(&[("m", s)]), &Fetched::new(), &over).map_err(|e| e.to_string()),
        Err("result.m: stderr is 9000000 bytes, over the limit of 8 MiB".to_string())
    );
}

#[test]
fn samples_must_be_positive_normal_numbers() {
    let re = source(
        Source::Stdout {
            regex: r"v=(\S+)".into(),
        },
        None,
    );
    for (text, shown) in [
        ("v=0", "0"),
        ("v=-3", "-3"),
        ("v=inf", "inf"),
        ("v=NaN", "NaN"),
        ("v=5e-324", "0.000"),
    ] {
        let e = one(re.clone(), &[], &[("stdout", text)]).expect_err(text);
        assert!(
            e.starts_with("result.m: stdout: 'v=(\\S+)': sample "),
            "{e}"
        );
        assert!(e.contains(shown), "{e}");
        assert!(e.ends_with("is not a positive normal number"), "{e}");
    }
}

#[test]
fn json_paths() {
    let doc = r#"{"a": {"b": [1, 2.5, [3]]}, "runs": [{"k": "x", "v": 4}, {"k": "y", "v": 5}], "s": "no"}"#;
    let files = [("o.json", doc)];
    let get = |p: &str| one(source(json("o.json", p), None), &files, &[]);
    assert_eq!(get("a.b"), Ok(vec![1.0, 2.5, 3.0]));
    assert_eq!(get("a.b[1]"), Ok(vec![2.5]));
    assert_eq!(get("a.b[-1]"), Ok(vec![3.0]));
    assert_eq!(get("runs[*].v"), Ok(vec![4.0, 5.0]));
    assert_eq!(get("runs[?k==y].v"), Ok(vec![5.0]));
    assert_eq!(
        get("a.c"),
        Err("result.m: o.json: a.c: a has no key 'c' (keys: b)".to_string())
    );
    assert_eq!(
        get("a.b[7]"),
        Err("result.m: o.json: a.b[7]: a.b has 3 elements, no [7]".to_string())
    );
    assert_eq!(
        get("s"),
        Err("result.m: o.json: s: s is a string, not a number".to_string())
    );
    assert_eq!(
        get("runs[?k==z].v"),
        Err("result.m: o.json: runs[?k==z].v: selects no numbers".to_string())
    );
    assert_eq!(
        get("s.x"),
        Err("result.m: o.json: s.x: s is a string, not an object".to_string())
    );
    // A file that is not JSON, or did not come back.
    assert!(
        one(
            source(json("o.json", "a"), None),
            &[("o.json", "{oops")],
            &[]
        )
        .is_err_and(|e| e.starts_with("result.m: o.json: not valid JSON: "))
    );
    let missing: Fetched = [("o.json".to_string(), Err(FileError::NotWritten))].into();
    assert_eq!(
        extract(
            &spec(&[("m", source(json("o.json", "a"), None))]),
            &missing,
            &Fetched::new()
        )
        .map_err(|e| e.to_string()),
        Err("result.m: o.json was not written".to_string())
    );
}

#[test]
fn csv_columns() {
    let text = "step, ms ,tokens\n1, 12.5, 100\n2,13,101\n";
    let col = |c: &str| {
        source(
            Source::Csv {
                file: "o.csv".into(),
                column: c.into(),
            },
            None,
        )
    };
    assert_eq!(
        one(col("ms"), &[("o.csv", text)], &[]),
        Ok(vec![12.5, 13.0])
    );
    assert_eq!(
        one(col("lat"), &[("o.csv", text)], &[]),
        Err("result.m: o.csv: no column 'lat' (columns: step, ms, tokens)".to_string())
    );
    assert_eq!(
        one(col("ms"), &[("o.csv", "ms\n1\nn/a\n")], &[]),
        Err("result.m: o.csv: column 'ms', row 2: 'n/a' is not a number".to_string())
    );
    assert_eq!(
        one(col("ms"), &[("o.csv", "ms\n")], &[]),
        Err("result.m: o.csv: column 'ms' has no rows".to_string())
    );
}

/// Every metric a preset provides, read from `doc` written as its file.
fn from_preset(name: &str, doc: &str) -> Result<BTreeMap<String, Vec<f64>>, String> {
    let p = preset(name).expect("preset");
    let names: Vec<&str> = p.metrics.iter().map(|(m, _)| *m).collect();
    let spec = ResultSpec {
        preset: Some(name.into()),
        metrics: p.sources(p.file, &names),
    };
    assert_eq!(spec.metrics.len(), p.metrics.len());
    extract(&spec, &fetched(&[(p.file, doc)]), &Fetched::new()).map_err(|e| e.to_string())
}

/// hyperfine 1.x `--export-json` (the fields of its exported
/// `BenchmarkResult`).
const HYPERFINE: &str = r#"{
  "results": [
    {
      "command": "./bench --threads 4",
      "mean": 0.10425,
      "stddev": 0.0021,
      "median": 0.1041,
      "user": 0.0912,
      "system": 0.0120,
      "min": 0.1019,
      "max": 0.1078,
      "times": [0.1019, 0.1041, 0.1030, 0.1078, 0.1044],
      "exit_codes": [0, 0, 0, 0, 0]
    }
  ]
}"#;

#[test]
fn preset_hyperfine() {
    let m = from_preset("hyperfine", HYPERFINE).expect("metrics");
    assert_eq!(m["time"], vec![0.1019, 0.1041, 0.1030, 0.1078, 0.1044]);
    assert_eq!(m["mean"], vec![0.10425]);
    assert_eq!(m["median"], vec![0.1041]);
    assert_eq!(m["system"], vec![0.0120]);
}

/// `vllm bench serve --save-result --percentile-metrics ttft,tpot,itl,e2el`
/// (the keys of the result it saves, vLLM 0.31; percentiles at the default
/// 99).
const VLLM: &str = r#"{
  "date": "20250801-101500",
  "backend": "vllm",
  "model_id": "meta-llama/Llama-3.1-8B-Instruct",
  "num_prompts": 200,
  "request_rate": "inf",
  "max_concurrency": 32,
  "duration": 41.73,
  "completed": 200,
  "total_input_tokens": 204800,
  "total_output_tokens": 25600,
  "request_throughput": 4.79,
  "request_goodput": null,
  "output_throughput": 613.4,
  "total_token_throughput": 5521.2,
  "mean_ttft_ms": 212.4,
  "median_ttft_ms": 198.7,
  "std_ttft_ms": 41.0,
  "p99_ttft_ms": 388.1,
  "mean_tpot_ms": 48.2,
  "median_tpot_ms": 47.9,
  "std_tpot_ms": 2.1,
  "p99_tpot_ms": 55.3,
  "mean_itl_ms": 48.0,
  "median_itl_ms": 44.6,
  "std_itl_ms": 9.8,
  "p99_itl_ms": 96.2,
  "mean_e2el_ms": 6330.5,
  "median_e2el_ms": 6301.0,
  "std_e2el_ms": 310.2,
  "p99_e2el_ms": 7012.4,
  "input_lens": [1024, 1024],
  "output_lens": [128, 128],
  "ttfts": [0.201, 0.188],
  "itls": [[0.044, 0.046], [0.045]],
  "errors": ["", ""]
}"#;

#[test]
fn preset_vllm_bench() {
    let m = from_preset("vllm-bench", VLLM).expect("metrics");
    assert_eq!(m["output_throughput"], vec![613.4]);
    assert_eq!(m["request_throughput"], vec![4.79]);
    assert_eq!(m["p99_ttft_ms"], vec![388.1]);
    assert_eq!(m["median_e2el_ms"], vec![6301.0]);
    assert_eq!(m.len(), 16);
    // Without `--percentile-metrics` naming e2el, vLLM writes no e2el keys.
    let trimmed: String = VLLM
        .lines()
        .filter(|l| !l.contains("e2el"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        from_preset("vllm-bench", &trimmed)
            .is_err_and(|e| e.starts_with("result.mean_e2el_ms: vllm-bench.json: mean_e2el_ms: the document has no key 'mean_e2el_ms'"))
    );
}

/// `llama-bench -o json` (the example of llama-bench's documentation,
/// llama.cpp build 5163, trimmed: one object per test; `pp512` has `n_gen` 0,
/// `tg128` has `n_prompt` 0).
const LLAMA_BENCH: &str = r#"[
  {
    "build_commit": "8cf427ff",
    "build_number": 5163,
    "model_type": "qwen2 7B Q4_K - Medium",
    "n_batch": 2048,
    "n_threads": 8,
    "n_gpu_layers": 99,
    "n_prompt": 512,
    "n_gen": 0,
    "n_depth": 0,
    "test_time": "2025-04-24T11:58:50Z",
    "avg_ns": 72135640,
    "stddev_ns": 1453752,
    "avg_ts": 7100.002165,
    "stddev_ts": 140.341520,
    "samples_ns": [ 74601900, 71632900, 71745200, 71952700, 70745500 ],
    "samples_ts": [ 6863.1, 7147.55, 7136.37, 7115.79, 7237.21 ]
  },
  {
    "build_commit": "8cf427ff",
    "build_number": 5163,
    "model_type": "qwen2 7B Q4_K - Medium",
    "n_batch": 2048,
    "n_threads": 8,
    "n_gpu_layers": 99,
    "n_prompt": 0,
    "n_gen": 128,
    "n_depth": 0,
    "test_time": "2025-04-24T11:58:51Z",
    "avg_ns": 1076767880,
    "stddev_ns": 9449585,
    "avg_ts": 118.881588,
    "stddev_ts": 1.041811,
    "samples_ns": [ 1075361300, 1065089400, 1071761200, 1081934900, 1089692600 ],
    "samples_ts": [ 119.03, 120.178, 119.43, 118.307, 117.464 ]
  }
]"#;

#[test]
fn preset_llama_bench() {
    let m = from_preset("llama-bench", LLAMA_BENCH).expect("metrics");
    assert_eq!(m["pp_ts"], vec![6863.1, 7147.55, 7136.37, 7115.79, 7237.21]);
    assert_eq!(m["tg_ts"], vec![119.03, 120.178, 119.43, 118.307, 117.464]);
    assert_eq!(m["avg_ts"], vec![7100.002165, 118.881588]);
    assert_eq!(m["samples_ts"].len(), 10);
    assert_eq!(m["avg_ns"], vec![72135640.0, 1076767880.0]);
}

/// pytest-benchmark 4.0 `--benchmark-json` with `--benchmark-save-data`
/// (fields of its `Stats`; times in seconds).
const PYTEST_BENCHMARK: &str = r#"{
  "machine_info": {"node": "gpu-01", "python_version": "3.11.9"},
  "commit_info": {"id": "5b1c0e2", "dirty": false},
  "benchmarks": [
    {
      "group": null,
      "name": "test_matmul",
      "fullname": "tests/test_perf.py::test_matmul",
      "params": null,
      "param": null,
      "extra_info": {},
      "options": {"disable_gc": false, "timer": "perf_counter", "min_rounds": 5, "max_time": 1.0, "min_time": 5e-06, "warmup": false},
      "stats": {
        "min": 0.0123,
        "max": 0.0141,
        "mean": 0.0129,
        "stddev": 0.0007,
        "rounds": 5,
        "median": 0.0127,
        "iqr": 0.0009,
        "q1": 0.0124,
        "q3": 0.0133,
        "iqr_outliers": 0,
        "stddev_outliers": 1,
        "outliers": "1;0",
        "ld15iqr": 0.0123,
        "hd15iqr": 0.0141,
        "ops": 77.52,
        "total": 0.0645,
        "data": [0.0123, 0.0127, 0.0125, 0.0141, 0.0129],
        "iterations": 1
      }
    }
  ],
  "datetime": "2025-06-02T09:14:03.512345",
  "version": "4.0.0"
}"#;

#[test]
fn preset_pytest_benchmark() {
    let m = from_preset("pytest-benchmark", PYTEST_BENCHMARK).expect("metrics");
    assert_eq!(m["data"], vec![0.0123, 0.0127, 0.0125, 0.0141, 0.0129]);
    assert_eq!(m["median"], vec![0.0127]);
    assert_eq!(m["ops"], vec![77.52]);
    assert_eq!(m["min"], vec![0.0123]);
    // Without --benchmark-save-data there is no `data`.
    let without = PYTEST_BENCHMARK.replace("\"data\"", "\"nodata\"");
    assert!(
        from_preset("pytest-benchmark", &without)
            .is_err_and(|e| e.starts_with("result.data: pytest-benchmark.json: benchmarks[*].stats.data: benchmarks[0].stats has no key 'data'"))
    );
}
