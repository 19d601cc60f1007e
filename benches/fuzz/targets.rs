//! The fuzz targets: bytes in, through the public functions the binary
//! uses. Shared by the fuzzer (benches/fuzz.rs) and the regression replay
//! (tests/it/fuzz_regressions.rs).

use std::path::{Path, PathBuf};

/// The targets, by name.
pub const TARGETS: &[&str] = &[
    "study",
    "inventory",
    "result",
    "tuned",
    "ledger",
    "template",
];

/// Run one input through `target` (panics are the caller's to catch).
pub fn run_target(target: &str, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match target {
        "study" => study(&text),
        "inventory" => {
            let _ = tunectl::spec::Inventory::from_text(Path::new("inventory.yaml"), &text);
        }
        "result" => result(data),
        "tuned" => tuned(&text),
        "ledger" => ledger(data),
        "template" => template(&text),
        other => panic!("unknown target {other}"),
    }
}

fn study(text: &str) {
    let Ok(s) = tunectl::spec::Study::from_text(Path::new("/fuzz/study.yaml"), text) else {
        return;
    };
    let _ = s.spec_hash();
    let Ok(r) = tunectl::spec::CommandRenderer::new(&s) else {
        return;
    };
    let mut vars = tunectl::spec::TrialVars::default();
    for k in &s.knobs {
        vars.set(&k.name, k.default.clone());
    }
    for c in &s.cells {
        if let Some(v) = c.values.first() {
            vars.set(&c.name, v.clone());
        }
    }
    for name in tunectl::spec::study::RESERVED_VARIABLES {
        vars.set(name, tunectl::spec::Value::Str(format!("/x/{name}")));
    }
    let _ = r.command(&vars, &[]);
    let _ = r.env(&vars);
}

fn result(data: &[u8]) {
    use tunectl::ledger::records::ExitInfo;
    use tunectl::transport::AttemptOutcome;
    use tunectl::transport::local::RunOutput;
    let (mode, body) = data.split_first().unwrap_or((&0, &[]));
    // Built once: its patterns are regexes.
    static CLASSIFIER: std::sync::OnceLock<tunectl::decide::gate::Classifier> =
        std::sync::OnceLock::new();
    let c = CLASSIFIER.get_or_init(tunectl::decide::gate::Classifier::default);
    match mode % 3 {
        0 => {
            let outcome = AttemptOutcome {
                run: Some(RunOutput {
                    exit: ExitInfo {
                        code: Some(0),
                        signal: None,
                    },
                    ..Default::default()
                }),
                result: Some(body.to_vec()),
                ..Default::default()
            };
            let _ = tunectl::transport::attempt::judge(&outcome, "t", c, 1.0);
        }
        1 => {
            let _ = tunectl::decide::gate::parse_values(body);
        }
        _ => {
            // A failed run's stderr, read by the failure classifier.
            let outcome = AttemptOutcome {
                run: Some(RunOutput {
                    exit: ExitInfo {
                        code: Some(i32::from(body.first().copied().unwrap_or(1))),
                        signal: None,
                    },
                    stderr_tail: String::from_utf8_lossy(body).into_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let _ = tunectl::transport::attempt::judge(&outcome, "t", c, 1.0);
        }
    }
}

fn tuned(text: &str) {
    use tunectl::tuned;
    let path = PathBuf::from("tuned/x.yaml");
    let Ok(file) = tuned::parse(&path, text) else {
        return;
    };
    let class = file.host_class.clone();
    let label = file.class_label.clone();
    let files = vec![(path, file)];
    let _ = tuned::check_domains(&files);
    let host = tuned::ThisHost {
        class: Ok((class, label)),
    };
    for cell in [vec![], vec!["n=1".to_string()], vec!["batch=4.5".into()]] {
        if let Ok(cell) = tuned::parse_cell(&cell) {
            let choice = tuned::choose(&files, &host, &cell);
            let env = tuned::environment(&choice, &cell);
            let vars = tuned::template_vars(&choice.knobs, &cell);
            let _ = tunectl::spec::template::render_shell("run {{ n }}", &vars, &env);
        }
    }
}

fn ledger(data: &[u8]) {
    use tunectl::ledger::records::*;
    let (mode, body) = data.split_first().unwrap_or((&0, &[]));
    match mode % 6 {
        0 => {
            let _ = tunectl::ledger::index::decode("s", body);
        }
        1 => {
            if let Ok(r) = serde_json::from_slice::<AttemptRecord>(body) {
                let _ = serde_json::to_vec(&r);
                let _ = tunectl::ledger::index::slim(r);
            }
        }
        2 => {
            if let Ok(r) = serde_json::from_slice::<StudyRecord>(body) {
                let _ = tunectl::decide::analyze(&r, &Default::default(), &[]);
            }
        }
        3 => {
            let _ = serde_json::from_slice::<HostRecord>(body);
        }
        4 => {
            let _ = serde_json::from_slice::<VoidRecord>(body);
            let _ = serde_json::from_slice::<DropRecord>(body);
        }
        _ => {
            let _ = serde_json::from_slice::<tunectl::ledger::lease::LeaseRecord>(body);
        }
    }
}

/// `TEMPLATE \x1f VALUE \x1f VALUE ...`: the template is rendered with
/// `v0`, `v1`, ... (and the reserved names) set to the values.
fn template(text: &str) {
    let mut parts = text.split('\u{1f}');
    let source = parts.next().unwrap_or("");
    let mut vars = tunectl::spec::TrialVars::default();
    for (i, v) in parts.enumerate() {
        vars.set(&format!("v{i}"), tunectl::spec::Value::Str(v.to_string()));
    }
    for name in ["v0", "v1", "v2"] {
        if !vars.entries.contains_key(name) {
            vars.set(name, tunectl::spec::Value::Int(7));
        }
    }
    let _ = tunectl::spec::template::check_shell_template(source);
    let _ = tunectl::spec::template::render_shell(source, &vars, &[]);
}
