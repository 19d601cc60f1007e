//! The shipped examples, templates and inventories load, `plan --dry-run`
//! of the quickstart study is stable (snapshot) and writes and runs
//! nothing, and the onnxruntime example runs end to end with its gate as
//! documented.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

use crate::support;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tunectl(dir: &Path) -> Command {
    support::env::tunectl_in(dir)
}

/// Every `*.yaml` / `*.yml` file under `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_example_and_inventory_validates() {
    let root = repo();
    let mut files = yaml_files(&root.join("examples"));
    let examples = files.len();
    files.extend(yaml_files(&root.join("inventories")));
    assert!(examples >= 1, "no study under examples/");
    assert!(
        files.len() > examples,
        "no inventory under inventories/: {files:?}"
    );
    for f in &files {
        let out = tunectl(&root).arg("validate").arg(f).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{} does not validate:\n{stderr}",
            f.display()
        );
        let kind = if f.starts_with(root.join("inventories")) {
            "inventory"
        } else {
            "study"
        };
        assert!(
            stderr.contains(&format!("{}: valid {kind}", f.display())),
            "{}: {stderr}",
            f.display()
        );
    }
    // All at once, too.
    let out = tunectl(&root)
        .arg("validate")
        .args(&files)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
}

/// Every study template under `templates/` (every `*.yaml` / `*.yml`, in
/// subdirectories too, so a new one is tested without being named here)
/// validates and plans with `--dry-run` on a machine without the tools it
/// runs (vLLM, llama.cpp, PyTorch, hyperfine), lists trials, and is in the
/// table of `templates/README.md`.
#[test]
fn every_template_validates_and_plans() {
    let root = repo();
    let templates = yaml_files(&root.join("templates"));
    let names: Vec<String> = templates
        .iter()
        .map(|f| {
            f.strip_prefix(root.join("templates"))
                .expect("under templates/")
                .display()
                .to_string()
        })
        .collect();
    for shipped in [
        "hyperfine.yaml",
        "kernel-tiles.yaml",
        "llama-bench.yaml",
        "pytorch.yaml",
        "vllm-serve.yaml",
        "vllm-throughput.yaml",
    ] {
        assert!(
            names.iter().any(|n| n == shipped),
            "templates/{shipped} is missing: {names:?}"
        );
    }
    let readme =
        std::fs::read_to_string(root.join("templates/README.md")).expect("templates/README.md");
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("ledger");
    for (f, name) in templates.iter().zip(&names) {
        assert!(
            readme.contains(&format!("[`{name}`]({name})")),
            "templates/README.md does not list {name}"
        );
        let out = tunectl(&root).arg("validate").arg(f).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{} does not validate:\n{stderr}",
            f.display()
        );
        assert!(
            stderr.contains(&format!("{}: valid study", f.display())),
            "{}: {stderr}",
            f.display()
        );

        let out = tunectl(&root)
            .arg("plan")
            .arg(f)
            .args(["--dry-run", "--json", "--ledger"])
            .arg(&ledger)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{} does not plan:\n{stderr}",
            f.display()
        );
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
        assert_eq!(plan["dry_run"], true, "{}", f.display());
        let total = plan["total_trials"].as_u64().expect("total_trials");
        assert!(
            total > 0,
            "{}: the plan lists no trials: {plan}",
            f.display()
        );
        let cells = plan["cells"].as_array().expect("cells");
        assert!(!cells.is_empty(), "{}: {plan}", f.display());
        for c in cells {
            assert!(
                c["trials_per_class"].as_u64().expect("trials_per_class") > 0,
                "{}: a cell without trials: {c}",
                f.display()
            );
        }
        let first = plan["first_configs"].as_array().expect("first_configs");
        assert!(
            first
                .first()
                .and_then(|c| c["command"].as_str())
                .is_some_and(|c| !c.is_empty()),
            "{}: no rendered command: {plan}",
            f.display()
        );
    }
    assert!(!ledger.exists(), "plan --dry-run created the ledger");
}

#[test]
fn the_example_inventories_plan_with_the_quickstart_study() {
    let root = repo();
    let tmp = tempfile::tempdir().expect("tempdir");
    for inv in yaml_files(&root.join("inventories")) {
        let out = tunectl(&root)
            .args([
                "plan",
                "examples/quickstart/study.yaml",
                "--dry-run",
                "--json",
            ])
            .arg("--inventory")
            .arg(&inv)
            .arg("--ledger")
            .arg(tmp.path().join("ledger"))
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{}: {stderr}", inv.display());
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
        assert_eq!(plan["dry_run"], true);
        let hosts = plan["hosts"].as_array().expect("hosts");
        assert!(!hosts.is_empty());
        for h in hosts {
            assert!(h["transport"].is_string(), "{h}");
        }
    }
    assert!(!tmp.path().join("ledger").exists());
}

#[test]
fn quickstart_plan_snapshot() {
    let root = repo();
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("ledger");
    let out = tunectl(&root)
        .args(["plan", "examples/quickstart/study.yaml", "--dry-run"])
        .arg("--ledger")
        .arg(&ledger)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !ledger.exists(),
        "plan --dry-run created the ledger directory"
    );

    // Machine-dependent parts: absolute paths (the ledger tempdir, the
    // checkout), the host class id and label, the CPU count.
    let mut filters: Vec<(String, String)> = Vec::new();
    let mut paths = vec![
        ledger.display().to_string(),
        root.display().to_string(),
        std::fs::canonicalize(&root)
            .expect("canonical root")
            .display()
            .to_string(),
    ];
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in paths {
        filters.push((regex::escape(&p), "[PATH]".to_string()));
    }
    filters.push((r"hc-[0-9a-f]{12}".to_string(), "[CLASS]".to_string()));
    filters.push((
        r"\[CLASS\] · .* · hosts: ".to_string(),
        "[CLASS] · [CLASS LABEL] · hosts: ".to_string(),
    ));
    filters.push((r"\(\d+ cpus\)".to_string(), "([N] cpus)".to_string()));
    let filters: Vec<(&str, &str)> = filters
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    insta::with_settings!({filters => filters}, {
        insta::assert_snapshot!("quickstart_plan", stdout);
    });
}

/// A copy of the quickstart study whose trial program is a fake that leaves
/// a marker file when it runs.
fn quickstart_with_fake_program(dir: &Path) -> PathBuf {
    let study = dir.join("quickstart");
    std::fs::create_dir_all(study.join("bin")).expect("mkdir");
    // `budget` is not part of the spec: keep the launch below short.
    let text =
        std::fs::read_to_string(repo().join("examples/quickstart/study.yaml")).expect("read study");
    assert!(text.contains("budget: {max_trials: 1000}"), "{text}");
    let text = text.replace("budget: {max_trials: 1000}", "budget: {max_trials: 8}");
    std::fs::write(study.join("study.yaml"), text).expect("write study");
    let fake = study.join("bin/quickstart");
    std::fs::write(
        &fake,
        "#!/bin/sh\n# FAKE quickstart for tunectl's tests: it only proves it ran.\n\
         echo \"$*\" >> \"$(dirname \"$0\")/../RAN\"\n\
         echo 1 > out.txt\n\
         echo '{\"metrics\": {\"throughput\": 1, \"time_ms\": 1}}' > \"$TUNECTL_RESULT\"\n",
    )
    .expect("write fake");
    make_executable(&fake);
    study.join("study.yaml")
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[test]
fn plan_dry_run_writes_nothing_and_runs_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let study = quickstart_with_fake_program(tmp.path());
    let ledger = tmp.path().join("ledger");
    let work = tmp.path().join("work");
    let before = list_tree(tmp.path());
    for extra in [&[][..], &["--json"][..]] {
        let out = tunectl(tmp.path())
            .arg("plan")
            .arg(&study)
            .arg("--dry-run")
            .args(extra)
            .arg("--ledger")
            .arg(&ledger)
            .env("TUNECTL_WORKDIR", &work)
            .output()
            .expect("run");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!ledger.exists(), "the ledger directory was created");
    assert!(!work.exists(), "the work directory was created");
    assert!(
        !tmp.path().join("quickstart/RAN").exists(),
        "a trial ran during plan"
    );
    assert_eq!(before, list_tree(tmp.path()), "plan changed files");

    // The fake does run when launched: the marker check can fail.
    let out = tunectl(tmp.path())
        .arg("launch")
        .arg(&study)
        .args(["--progress", "quiet", "--ledger"])
        .arg(&ledger)
        .arg("--workdir")
        .arg(&work)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .expect("run");
    // The fake's trials write no result: the buckets are DRAFTs (exit 3).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("[DRAFT]"), "{stderr}");
    assert!(tmp.path().join("quickstart/RAN").exists());

    // Now the ledger holds trials: plan reads them and still writes nothing.
    let before = list_tree(tmp.path());
    let out = tunectl(tmp.path())
        .arg("plan")
        .arg(&study)
        .args(["--dry-run", "--json", "--ledger"])
        .arg(&ledger)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    assert_eq!(
        plan["ledger_trials_in_plan"], plan["total_trials"],
        "{plan}"
    );
    assert_eq!(before, list_tree(tmp.path()), "plan changed the ledger");
}

/// `plan` must not create the ledger for a `file://` URL either (the README:
/// "It runs nothing and writes nothing").
#[test]
fn plan_dry_run_with_a_file_url_ledger_creates_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("ledger");
    let url = format!("file://{}", ledger.display());
    let out = tunectl(&repo())
        .args([
            "plan",
            "examples/quickstart/study.yaml",
            "--dry-run",
            "--ledger",
        ])
        .arg(&url)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !ledger.exists(),
        "`tunectl plan --dry-run --ledger {url}` created {}",
        ledger.display()
    );
}

/// Every path under `dir` with its size, sorted.
fn list_tree(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.push((path, if meta.is_dir() { 0 } else { meta.len() }));
        }
    }
    out.sort();
    out
}

/// `examples/onnxruntime` end to end, through the binary: its setup script
/// installs onnxruntime, onnx and numpy from PyPI into
/// `.cache/onnxruntime-venv` (once; `scripts/test.sh` runs it before the
/// tests), then the study is launched into a temporary ledger and the JSON
/// report is checked. Which config wins depends on the machine and its load,
/// so only the gate and the shape of the decision are asserted: the float16
/// weights are rejected as `output_changed` under the tolerance, every other
/// config is eligible, and the bucket has a decision. When the machine is
/// too busy for the drift watch to trust it, the sweep is cut short and the
/// bucket must be a DRAFT that says so.
#[test]
fn onnxruntime_example_rejects_the_fp16_weights_and_decides_its_bucket() {
    let root = repo();
    support::example_python("onnxruntime");

    let tmp = tempfile::tempdir().expect("tempdir");
    let ledger = tmp.path().join("ledger");
    let study = "examples/onnxruntime/study.yaml";
    let out = tunectl(&root)
        .args(["launch", study, "--progress", "quiet", "--ledger"])
        .arg(&ledger)
        .arg("--workdir")
        .arg(tmp.path().join("work"))
        .timeout(std::time::Duration::from_secs(900))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 0: every bucket a VERDICT; 3: a DRAFT (say, a winner the final round
    // on a busy machine did not confirm). Both are a finished launch.
    let launch_code = out.status.code();
    assert!(
        matches!(launch_code, Some(0 | 3)),
        "launch: {:?}\n{stderr}",
        out.status
    );

    let out = tunectl(&root)
        .args(["report", study, "--format", "json", "--ledger"])
        .arg(&ledger)
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let classes = report["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 1, "one host class (local): {report}");
    let class = &classes[0];
    let cells = class["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 1, "the study has one cell: {report}");
    let cell = &cells[0];
    assert_eq!(cell["baseline_state"], "ok", "{cell}");
    // On a busy machine the drift watch may give up on the host: its
    // anchors never came back within the cool-down band. Then the sweep is
    // cut short, and the only honest outcome is a DRAFT that names the drop.
    let dropped = cell["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .any(|n| n.as_str().is_some_and(|n| n.starts_with("dropped on host")));
    let full_sweep = !dropped;
    if full_sweep {
        assert!(cell["baseline"]["trials"].as_u64() >= Some(3), "{cell}");
    }

    // The trap: float16 weights change the output beyond the tolerance. A
    // sweep cut short may not have reached it; whatever was measured is
    // judged the same way.
    let rejected = cell["rejected"].as_array().expect("rejected");
    if full_sweep {
        assert_eq!(
            rejected.len(),
            1,
            "only weights=fp16 is rejected: {rejected:#?}"
        );
    } else {
        assert!(rejected.len() <= 1, "at most weights=fp16: {rejected:#?}");
    }
    for fp16 in rejected {
        check_fp16_rejection(fp16);
    }

    // Every other config passed the gate, with all its repeats (a sweep cut
    // short: every config it measured).
    let eligible = cell["eligible"].as_array().expect("eligible");
    let labels: Vec<&str> = eligible
        .iter()
        .map(|c| c["label"].as_str().expect("label"))
        .collect();
    if full_sweep {
        assert_eq!(eligible.len(), 6, "7 candidates, 1 rejected: {labels:?}");
        assert!(
            labels.contains(&"opt_level=disable"),
            "opt_level=disable differs in the last bits and passes only by the tolerance: {labels:?}"
        );
    } else {
        assert!(eligible.len() <= 6, "7 candidates at most: {labels:?}");
    }
    for c in eligible {
        assert_eq!(c["config"]["weights"], "fp32", "{c}");
        if full_sweep {
            assert!(c["trials"].as_u64() >= Some(3), "{c}");
        }
        assert!(c["rejection"].is_null(), "{c}");
    }

    // A decision for the bucket: a float32 config or the baseline.
    let buckets = class["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 1, "{report}");
    let bucket = &buckets[0];
    assert_eq!(bucket["cells"], serde_json::json!([cell["cell_label"]]));
    assert!(
        !bucket["decision"].as_str().expect("decision").is_empty(),
        "{bucket}"
    );
    assert!(bucket["outcome"].is_string(), "{bucket}");
    if full_sweep {
        assert!(
            matches!(bucket["level"].as_str(), Some("verdict" | "draft")),
            "{bucket}"
        );
    } else {
        assert_eq!(bucket["level"], "draft", "a sweep cut short: {bucket}");
        assert_eq!(launch_code, Some(3), "a DRAFT exits 3: {stderr}");
        assert_eq!(bucket["outcome"], "cell_dropped", "{bucket}");
    }
    assert_eq!(bucket["config"]["weights"], "fp32", "{bucket}");
}

/// weights=fp16, rejected because its outputs moved beyond the tolerance.
fn check_fp16_rejection(fp16: &serde_json::Value) {
    assert_eq!(fp16["label"], "weights=fp16", "{fp16}");
    assert_eq!(fp16["config"]["weights"], "fp16", "{fp16}");
    assert_eq!(fp16["rejection"]["class"], "output_changed", "{fp16}");
    let detail = fp16["rejection"]["detail"].as_str().expect("detail");
    assert!(
        detail.starts_with("outputs.json[")
            && detail.contains("exceeds atol 1e-5 + rtol 0.0001")
            && detail.contains("beyond tolerance"),
        "{detail}"
    );
}

/// `tunectl completions SHELL` and `tunectl man` are generated from the
/// argument definitions: every subcommand and a launch flag are in them.
#[test]
fn completions_and_the_manual_page_cover_every_command() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let commands = [
        "plan",
        "launch",
        "report",
        "export",
        "apply",
        "status",
        "ledger",
        "fingerprint",
        "validate",
        "completions",
        "man",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let out = tunectl(tmp.path())
            .args(["completions", shell])
            .output()
            .expect("run");
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for c in commands {
            assert!(text.contains(c), "{shell} completions lack `{c}`");
        }
        assert!(text.contains("notify"), "{shell} completions lack --notify");
    }
    let out = tunectl(tmp.path())
        .args(["completions", "tcsh"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = tunectl(tmp.path()).arg("man").output().expect("run");
    assert!(out.status.success(), "{out:?}");
    let man = String::from_utf8_lossy(&out.stdout);
    assert!(
        man.starts_with(".ie") && man.contains(".TH tunectl 1"),
        "{man}"
    );
    for c in commands {
        assert!(man.contains(c), "the manual page lacks `{c}`");
    }
}

/// The README's ten-line study, as written there, for a stand-in `bench`
/// (a FAKE program: throughput 1000 × threads, 10 % less at batch 16;
/// threads=8 writes another `out.bin`; batch=64 exits 3): it validates,
/// plans, launches with the README's commands, and ships threads=4
/// batch=32 with both traps rejected for their reasons.
#[test]
fn the_readme_study_runs_as_written() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let section = readme
        .split("## Your own command")
        .nth(1)
        .expect("the README's own-command section");
    let study = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("its yaml block");
    assert!(study.lines().count() <= 12, "{study}");
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("study.yaml"), study).expect("study");
    let bench = tmp.path().join("bench");
    std::fs::write(
        &bench,
        r#"#!/bin/sh
# FAKE program for the README's study.
while [ $# -gt 0 ]; do
    case $1 in
        --threads) t=$2; shift 2 ;;
        --batch) b=$2; shift 2 ;;
        --out) o=$2; shift 2 ;;
        *) shift ;;
    esac
done
if [ "$b" = 64 ]; then echo "batch too large" >&2; exit 3; fi
if [ "$t" = 8 ]; then echo wrong > "$o"; else echo right > "$o"; fi
tp=$((1000 * t))
if [ "$b" = 16 ]; then tp=$((tp * 9 / 10)); fi
r=$(od -An -N1 -tu1 /dev/urandom | tr -dc 0-9)
echo "throughput: $((tp + ${r:-0} % 10))"
"#,
    )
    .expect("bench");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bench, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // The README's commands, in its order.
    for args in [
        &["validate", "study.yaml"][..],
        &["plan", "study.yaml", "--dry-run"],
    ] {
        let out = tunectl(tmp.path()).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let out = tunectl(tmp.path())
        .args([
            "launch",
            "study.yaml",
            "--progress",
            "quiet",
            "--format",
            "json",
        ])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .expect("launch");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("launch JSON");
    assert!(
        support::finished(out.status.code(), &doc),
        "{doc:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tunectl(tmp.path())
        .args(["report", "study.yaml"])
        .output()
        .expect("report");
    assert!(out.status.success(), "{out:?}");
    let out = tunectl(tmp.path())
        .args(["report", "study.yaml", "--format", "json"])
        .output()
        .expect("report");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let class = &report["classes"][0];
    let bucket = &class["buckets"][0];
    assert_eq!(bucket["winner"]["label"], "threads=4", "{bucket:#}");
    let rejected: Vec<(String, String)> = class["cells"][0]["rejected"]
        .as_array()
        .expect("rejected")
        .iter()
        .map(|r| {
            (
                r["label"].as_str().unwrap_or_default().to_string(),
                r["rejection"]["class"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert!(
        rejected
            .iter()
            .any(|(l, c)| l.contains("threads=8") && c == "output_changed"),
        "{rejected:?}"
    );
    assert!(
        rejected
            .iter()
            .any(|(l, c)| l.contains("batch=64") && c == "crash"),
        "{rejected:?}"
    );
}
