//! Property tests (proptest, a few hundred cases each, seconds): quoting
//! keeps any value data, and the input parsers never panic on arbitrary
//! text. The long-running fuzzer is benches/fuzz.rs (docs/fuzzing.md).

use std::path::Path;

use proptest::prelude::*;
use tunectl::spec::template::{check_shell_template, render_shell};
use tunectl::spec::{TrialVars, Value};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text that likes shell metacharacters, quotes and control characters.
fn nasty() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("$(".to_string()),
            Just("`".to_string()),
            Just("'".to_string()),
            Just("\"".to_string()),
            Just("\\".to_string()),
            Just("\n".to_string()),
            Just(";".to_string()),
            Just("${".to_string()),
            Just("!".to_string()),
            Just("*".to_string()),
            "[ -~]{0,3}",
            "\\PC{0,2}",
        ],
        0..12,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_value_reaches_the_command_as_written_in_every_quoting(v in nasty()) {
        let mut vars = TrialVars::default();
        vars.set("v", Value::Str(v.clone()));
        let cmd = render_shell(
            r#"printf '%s|%s|%s|%s' {{ v }} "{{ v }}" '{{ v }}' --v={{ v }}"#,
            &vars,
        )
        .expect("renders");
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&cmd)
            .output()
            .expect("sh");
        prop_assert_eq!(
            String::from_utf8_lossy(&out.stdout).into_owned(),
            format!("{v}|{v}|{v}|--v={v}"),
            "command: {}", cmd
        );
    }

    #[test]
    fn template_checks_never_panic(t in "\\PC{0,64}", u in "[{}%#$`'\"\\\\()<>\n a-z-]{0,48}") {
        let _ = check_shell_template(&t);
        let _ = check_shell_template(&u);
        let mut vars = TrialVars::default();
        vars.set("a", Value::Str(t.clone()));
        let _ = render_shell(&u, &vars);
    }

    #[test]
    fn study_and_inventory_loading_never_panic(t in "[ -~\n]{0,200}") {
        let _ = tunectl::spec::Study::from_text(Path::new("s.yaml"), &t);
        let _ = tunectl::spec::Inventory::from_text(Path::new("i.yaml"), &t);
        let _ = tunectl::tuned::parse(Path::new("t.yaml"), &t);
    }
}
