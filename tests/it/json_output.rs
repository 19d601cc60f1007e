//! `--format json` of every command that prints data, through the binary:
//! stdout is one JSON document with its `schema`, the key fields have
//! their documented types, and docs/json.md documents every schema name
//! the code can emit. Also `--quiet` and `--verbose`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value as Json;

use crate::support::env::{Env, Out};

/// Two modes, one cell: a launch runs 6 trials of the FAKE program and
/// ends with a DRAFT (no confirmation round, exit 3), which leaves a
/// ledger every reader can show.
const STUDY: &str = r#"name: jsonout
knobs:
  mode: {kind: categorical, values: [base, fast], default: base}
trial:
  command: "sh {{ study_dir }}/fake-trial.sh {{ mode }} 1"
  timeout: 20s
objective: {metric: throughput, unit: ops/s, better: higher}
measurement: {warmup: 0, repeats: 3, anchor_every: 0, confirm_repeats: 0}
"#;

/// A study launched once (with `--format json`), shared by the tests that
/// only read it; and that launch's output.
fn launched() -> &'static (Env, Out) {
    static LAUNCHED: OnceLock<(Env, Out)> = OnceLock::new();
    LAUNCHED.get_or_init(|| {
        let env = Env::in_target_tmp("json-output-", STUDY);
        let out = env.launch(&["--format", "json"]);
        (env, out)
    })
}

fn docs_json_md() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The heading docs/json.md gives a schema.
fn heading(schema: &str) -> String {
    format!("## `{schema}`")
}

/// stdout parsed as one JSON document (nothing else may be there), whose
/// `schema` is `schema` and is documented in docs/json.md.
fn document(out: &Out, schema: &str) -> Json {
    let doc: Json = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", out.text()));
    assert_eq!(doc["schema"], schema, "{}", out.text());
    assert!(
        docs_json_md().contains(&heading(schema)),
        "docs/json.md does not document {schema}"
    );
    doc
}

fn is_u64(v: &Json) -> bool {
    v.as_u64().is_some()
}

/// A JSON number (never a string such as "1.2 s").
fn is_number(v: &Json) -> bool {
    v.is_number()
}

#[test]
fn launch_prints_its_outcome() {
    let (_, out) = launched();
    let doc = document(out, "tunectl.launch/1");
    // The document says the exit code the launch ended with.
    assert_eq!(doc["exit_code"].as_i64(), out.code.map(i64::from), "{doc}");
    assert_eq!(doc["outcome"], "draft", "{doc}");
    assert_eq!(doc["exit_code"], 3, "{doc}");
    assert_eq!(doc["study"], "jsonout", "{doc}");
    let summary = &doc["summary"];
    assert_eq!(summary["ran"], 6, "{doc}");
    for key in [
        "ok",
        "output_changed",
        "failed",
        "lost",
        "already_in_ledger",
        "skipped",
    ] {
        assert!(is_u64(&summary[key]), "{key}: {doc}");
    }
    assert!(
        doc["elapsed_seconds"].as_f64().is_some_and(|s| s > 0.0),
        "{doc}"
    );
    let buckets = doc["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 1, "{doc}");
    assert!(buckets[0]["ships"].is_string(), "{doc}");
    // People's lines stay on stderr.
    assert!(out.stderr.contains("ran 6 trials"), "{}", out.text());
}

#[test]
fn launch_of_an_invalid_study_prints_its_outcome_too() {
    let env = Env::new("name: broken\nknobs: 3\n");
    let out = env.launch(&["--format", "json"]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    let doc = document(&out, "tunectl.launch/1");
    assert_eq!(doc["outcome"], "invalid", "{doc}");
    assert_eq!(doc["exit_code"], 2, "{doc}");
    assert!(doc["summary"].is_null(), "{doc}");
    assert!(doc["message"].is_string(), "{doc}");
}

#[test]
fn plan_as_json_and_its_older_flag() {
    let (env, _) = launched();
    let study = env.study_arg();
    let args = |format: &[&'static str]| {
        let mut a = vec!["plan", study.as_str(), "--ledger", env.ledger_url()];
        a.extend_from_slice(format);
        a
    };
    let out = env.tunectl_run(&args(&["--format", "json"]));
    assert_eq!(out.code, Some(0), "{}", out.text());
    let doc = document(&out, "tunectl.plan/1");
    assert_eq!(doc["grid_configs"], 2, "a number, not a string: {doc}");
    assert!(is_u64(&doc["total_trials"]), "{doc}");
    assert_eq!(doc["ledger_study"]["state"], "launched", "{doc}");
    // The ledger has run times: the typical one is a number of seconds.
    assert!(is_number(&doc["typical_run_seconds"]), "{doc}");
    let class = &doc["classes"][0];
    assert!(is_u64(&class["trials"]), "{doc}");
    for key in ["worst_trial_seconds", "worst_wall_seconds"] {
        assert!(is_number(&class["cost"][key]), "{key}: {doc}");
    }
    let alias = env.tunectl_run(&args(&["--json"]));
    assert_eq!(alias.code, Some(0), "{}", alias.text());
    let again: Json = serde_json::from_str(&alias.stdout).expect("plan --json");
    assert_eq!(again, doc, "--json is --format json");
    // The two flags contradicting each other are refused.
    let both = env.tunectl_run(&args(&["--json", "--format", "text"]));
    assert_eq!(both.code, Some(2), "{}", both.text());
}

#[test]
fn status_as_json() {
    let (env, _) = launched();
    let study = env.study_arg();
    let out = env.tunectl_run(&[
        "status",
        &study,
        "--format",
        "json",
        "--ledger",
        env.ledger_url(),
    ]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    let doc = document(&out, "tunectl.status/1");
    assert_eq!(doc["study"], "jsonout", "{doc}");
    assert!(doc["ledger"].is_string(), "{doc}");
    assert_eq!(doc["unreadable_objects"], 0, "{doc}");
    assert_eq!(doc["leases"], serde_json::json!([]), "nothing runs: {doc}");
    let classes = doc["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 1, "{doc}");
    assert_eq!(classes[0]["done"], 6, "{doc}");
    assert_eq!(classes[0]["pending"], 0, "{doc}");
    assert!(classes[0]["host_class"].is_string(), "{doc}");
    let alias = env.tunectl_run(&["status", &study, "--json", "--ledger", env.ledger_url()]);
    let again: Json = serde_json::from_str(&alias.stdout).expect("status --json");
    assert_eq!(again, doc, "--json is --format json");
}

#[test]
fn report_as_json() {
    let (env, _) = launched();
    let out = env.tunectl_run(&[
        "report",
        &env.study_arg(),
        "--format",
        "json",
        "--ledger",
        env.ledger_url(),
    ]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    let doc = document(&out, "tunectl.report/2");
    assert_eq!(doc["study_id"], "jsonout", "{doc}");
    let cell = &doc["classes"][0]["cells"][0];
    let baseline = &cell["baseline"]["summary"];
    assert!(is_u64(&baseline["n"]), "{doc}");
    assert!(is_number(&baseline["median"]), "{doc}");
    assert!(is_number(&baseline["spread"]), "{doc}");
    assert!(
        doc["classes"][0]["buckets"][0]["level"].is_string(),
        "{doc}"
    );
    // Every field the document has, at the top, per class, per cell, per
    // bucket and per config, is in docs/json.md's section.
    let docs = docs_json_md();
    let section = docs
        .split("\n## ")
        .find(|s| s.starts_with("`tunectl.report/2`"))
        .expect("docs/json.md: tunectl.report/2");
    let class = &doc["classes"][0];
    for (what, object) in [
        ("top", &doc),
        ("class", class),
        ("cell", &class["cells"][0]),
        ("bucket", &class["buckets"][0]),
        ("config", &class["cells"][0]["baseline"]),
        ("next", &class["next"]),
        ("knob effect", &class["next"]["effects"][0]),
    ] {
        for key in object.as_object().expect("an object").keys() {
            assert!(
                section.contains(&format!("`{key}`")),
                "docs/json.md's tunectl.report/2 does not name the {what} field `{key}`"
            );
        }
    }
}

#[test]
fn export_as_json_says_what_it_wrote() {
    let (env, _) = launched();
    let dir = env.path().join("tuned-json");
    let out = env.tunectl_run(&[
        "export",
        &env.study_arg(),
        "--ledger",
        env.ledger_url(),
        "--out",
        &dir.display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    let doc = document(&out, "tunectl.export/1");
    assert_eq!(doc["study"], "jsonout", "{doc}");
    let files = doc["files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{doc}");
    let path = PathBuf::from(files[0]["path"].as_str().expect("path"));
    assert!(path.is_file(), "{} was not written", path.display());
    assert_eq!(files[0]["buckets"], 1, "{doc}");
    for key in ["with_winner", "keeping_baseline", "pending"] {
        assert!(is_u64(&files[0][key]), "{key}: {doc}");
    }
}

#[test]
fn ledger_check_as_json() {
    let (env, _) = launched();
    let out = env.tunectl_run(&[
        "ledger",
        "check",
        "--ledger",
        env.ledger_url(),
        "--format",
        "json",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    let doc = document(&out, "tunectl.ledger-check/1");
    assert_eq!(doc["clean"], true, "{doc}");
    let studies = doc["studies"].as_array().expect("studies");
    assert_eq!(studies.len(), 1, "{doc}");
    assert_eq!(studies[0]["study"], "jsonout", "{doc}");
    assert_eq!(studies[0]["readable_attempts"], 6, "{doc}");
    assert_eq!(studies[0]["damaged"], Json::Array(Vec::new()), "{doc}");
    assert!(studies[0]["study_record_problem"].is_null(), "{doc}");
}

/// The attempt objects of `study` in a local ledger directory.
fn attempt_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(attempt_files(&p));
        } else if p.extension().is_some_and(|x| x == "json")
            && p.components().any(|c| c.as_os_str() == "trials")
        {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn ledger_check_as_json_names_the_damage_and_exits_1() {
    let env = Env::new(STUDY);
    env.launch_ok(&[]);
    let files = attempt_files(&env.ledger().join("jsonout"));
    let victim = files.first().expect("an attempt object");
    std::fs::write(victim, "{\"truncated").expect("truncate");
    let out = env.tunectl_run(&[
        "ledger",
        "check",
        "jsonout",
        "--ledger",
        env.ledger_url(),
        "--format",
        "json",
    ]);
    assert_eq!(out.code, Some(1), "{}", out.text());
    let doc = document(&out, "tunectl.ledger-check/1");
    assert_eq!(doc["clean"], false, "{doc}");
    let damaged = doc["studies"][0]["damaged"].as_array().expect("damaged");
    assert_eq!(damaged.len(), 1, "{doc}");
    assert_eq!(damaged[0]["kind"], "unreadable", "{doc}");
    assert!(damaged[0]["reason"].is_string(), "{doc}");
    assert_eq!(doc["studies"][0]["unreadable"], 1, "{doc}");
    // The error still says it, on stderr.
    assert!(
        out.stderr.contains("1 unreadable objects"),
        "{}",
        out.text()
    );
}

#[test]
fn fingerprint_as_json_and_its_older_flag() {
    let env = Env::new(STUDY);
    let out = env.tunectl_run(&["fingerprint", "--format", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    let doc = document(&out, "tunectl.fingerprint/1");
    assert!(doc["host_class"].is_string(), "{doc}");
    assert!(doc["fingerprint_hash"].is_string(), "{doc}");
    let cpus = &doc["fingerprint"]["cpu_count"];
    assert!(cpus.is_null() || is_u64(cpus), "{doc}");
    assert!(doc["fingerprint"]["gpus"].is_array(), "{doc}");
    let alias = env.tunectl_run(&["fingerprint", "--json"]);
    let again: Json = serde_json::from_str(&alias.stdout).expect("fingerprint --json");
    assert_eq!(again["schema"], "tunectl.fingerprint/1", "{again}");
    assert_eq!(again["host_class"], doc["host_class"], "{again}");
    // YAML for people carries no schema.
    let yaml = env.tunectl_ok(&["fingerprint"]);
    assert!(!yaml.contains("tunectl.fingerprint/1"), "{yaml}");
}

#[test]
fn fingerprint_of_an_inventory_as_json() {
    let env = Env::new(STUDY);
    let inv = env.write(
        "inventory.yaml",
        "hosts:\n  - name: here\n    transport: local\n",
    );
    let out = env.tunectl_run(&[
        "fingerprint",
        "--inventory",
        &inv.display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.text());
    let doc = document(&out, "tunectl.fingerprint-inventory/1");
    let classes = doc["classes"].as_array().expect("classes");
    assert_eq!(classes.len(), 1, "{doc}");
    assert_eq!(classes[0]["hosts"][0]["host"], "here", "{doc}");
    assert_eq!(doc["unreachable"], Json::Array(Vec::new()), "{doc}");
}

#[test]
fn validate_as_json() {
    let env = Env::new(STUDY);
    let bad = env.write("bad.yaml", "name: bad\nknobs:\n  mode: {kind: nope}\n");
    let study = env.study_arg();
    let ok = env.tunectl_run(&["validate", &study, "--format", "json"]);
    assert_eq!(ok.code, Some(0), "{}", ok.text());
    let doc = document(&ok, "tunectl.validate/1");
    assert_eq!(doc["valid"], true, "{doc}");
    assert_eq!(doc["files"][0]["kind"], "study", "{doc}");

    let out = env.tunectl_run(&[
        "validate",
        &study,
        &bad.display().to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    let doc = document(&out, "tunectl.validate/1");
    assert_eq!(doc["valid"], false, "{doc}");
    let files = doc["files"].as_array().expect("files");
    assert_eq!(files.len(), 2, "{doc}");
    assert_eq!(files[0]["valid"], true, "{doc}");
    assert_eq!(files[1]["valid"], false, "{doc}");
    let problem = &files[1]["problems"][0];
    assert!(is_u64(&problem["line"]), "{doc}");
    assert!(is_u64(&problem["column"]), "{doc}");
    assert!(problem["field"].is_string(), "{doc}");
    assert!(problem["message"].is_string(), "{doc}");
    // The problems are still said on stderr.
    assert!(out.stderr.contains("bad.yaml:"), "{}", out.text());
}

/// An inventory is told by its top-level `hosts` key however the YAML is
/// written (flow style, a quoted key, after `---`); a `hosts:` line was
/// the test before, and such inventories were checked as studies.
#[test]
fn validate_tells_an_inventory_in_any_yaml_style() {
    let env = Env::new(STUDY);
    let inventories = [
        env.write(
            "flow.yaml",
            "{hosts: [{name: here, transport: local, slots: 1}]}\n",
        ),
        env.write(
            "quoted.yaml",
            "---\n\"hosts\":\n  - {name: here, transport: local, slots: 1}\n",
        ),
        env.write(
            "spaced.yaml",
            "hosts :\n  - name: here\n    transport: local\n    slots: 1\n",
        ),
    ];
    for file in &inventories {
        let path = file.display().to_string();
        let out = env.tunectl_run(&["validate", &path, "--format", "json"]);
        assert_eq!(out.code, Some(0), "{path}: {}", out.text());
        let doc = document(&out, "tunectl.validate/1");
        assert_eq!(doc["files"][0]["kind"], "inventory", "{path}: {doc}");
        assert_eq!(doc["files"][0]["valid"], true, "{path}: {doc}");
    }
    // A bad one in flow style is refused as an inventory, by field.
    let bad = env.write(
        "bad-flow.yaml",
        "{hosts: [{name: here, transport: telnet, slots: 1}]}\n",
    );
    let out = env.tunectl_run(&["validate", &bad.display().to_string(), "--format", "json"]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    let doc = document(&out, "tunectl.validate/1");
    assert_eq!(doc["files"][0]["kind"], "inventory", "{doc}");
    assert!(
        doc["files"][0]["problems"][0]["field"]
            .as_str()
            .is_some_and(|f| f.starts_with("hosts[0]")),
        "{doc}"
    );
}

/// Every schema name in the code has a section in docs/json.md, and the
/// docs name no schema the code does not know.
#[test]
fn docs_json_md_documents_every_schema() {
    let docs = docs_json_md();
    for schema in tunectl::schema::ALL {
        assert!(
            docs.contains(&heading(schema)),
            "docs/json.md has no section `## \\`{schema}\\``"
        );
    }
    let name = regex::Regex::new(r"tunectl\.[a-z-]+/[0-9]+").expect("regex");
    for m in name.find_iter(&docs) {
        assert!(
            tunectl::schema::ALL.contains(&m.as_str()),
            "docs/json.md names {}, which the code does not emit",
            m.as_str()
        );
    }
    // A schema name written anywhere in the sources is one of them (no
    // document gets a name that bypasses the list).
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("read source");
        for m in name.find_iter(&text) {
            assert!(
                tunectl::schema::ALL.contains(&m.as_str()),
                "{} names schema {}, which is not in schema::ALL",
                file.display(),
                m.as_str()
            );
        }
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

#[test]
fn quiet_says_no_notes_but_still_the_errors() {
    let env = Env::new(STUDY);
    let study = env.study_arg();
    let loud = env.tunectl_run(&["validate", &study]);
    assert!(loud.stderr.contains("valid study"), "{}", loud.text());
    let quiet = env.tunectl_run(&["-q", "validate", &study]);
    assert_eq!(quiet.code, Some(0), "{}", quiet.text());
    assert_eq!(quiet.stderr, "", "{}", quiet.text());
    // A global flag: after the command too.
    let quiet = env.tunectl_run(&["validate", &study, "--quiet"]);
    assert_eq!(quiet.stderr, "", "{}", quiet.text());
    let bad = env.write("bad.yaml", "name: bad\nknobs: 3\n");
    let out = env.tunectl_run(&["-q", "validate", &bad.display().to_string()]);
    assert_eq!(out.code, Some(2), "{}", out.text());
    assert!(out.stderr.contains("error: "), "{}", out.text());

    // A quiet launch: no progress, no summary, no per-bucket lines.
    let out = env.launch(&["--quiet", "--progress", "plain"]);
    assert!(out.code == Some(0) || out.code == Some(3), "{}", out.text());
    assert!(!out.stderr.contains("ran 6 trials"), "{}", out.text());
    assert!(!out.stderr.contains("launching study"), "{}", out.text());
    assert!(!out.stderr.contains("ships"), "{}", out.text());
    assert_eq!(env.all_attempts("jsonout").len(), 6, "it did run");
}

#[test]
fn verbose_raises_the_log_level() {
    let env = Env::new(STUDY);
    let plain = env.tunectl_run(&["fingerprint"]);
    assert_eq!(plain.code, Some(0), "{}", plain.text());
    assert!(
        !plain.stderr.contains("local probe finished"),
        "{}",
        plain.text()
    );
    let verbose = env.tunectl_run(&["-vv", "fingerprint"]);
    assert_eq!(verbose.code, Some(0), "{}", verbose.text());
    assert!(
        verbose.stderr.contains("local probe finished"),
        "-vv logs at debug:\n{}",
        verbose.text()
    );
    let both = env.tunectl_run(&["-q", "-v", "fingerprint"]);
    assert_eq!(both.code, Some(2), "{}", both.text());
}
