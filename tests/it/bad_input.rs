//! Bad study and inventory files: every case must exit 2 and name the
//! problem as `file:line:column: key.path: message`.
//!
//! Each case writes its file into a fresh tempdir and runs tunectl with that
//! tempdir as the working directory, so the file is named by a short relative
//! path (`study.yaml`, `inventory.yaml`) in the diagnostics.

use std::path::Path;

use assert_cmd::Command;

use crate::support;

/// A study that loads, used with bad inventories.
const VALID_STUDY: &str = r#"name: bad-input
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial:
  command: "echo {{ x }}"
objective: {metric: t, better: higher}
"#;

/// How a case is run.
#[derive(Clone, Copy, Debug)]
enum Run {
    /// `tunectl plan study.yaml --dry-run`
    PlanStudy,
    /// `tunectl validate <file>`
    Validate,
    /// `tunectl plan study.yaml --dry-run --inventory inventory.yaml`
    /// (study.yaml is [`VALID_STUDY`]).
    PlanInventory,
}

struct Case {
    name: &'static str,
    /// File name inside the tempdir.
    file: &'static str,
    text: &'static str,
    run: Run,
    /// Every fragment must appear in stderr.
    expect: &'static [&'static str],
}

fn tunectl(dir: &Path) -> Command {
    support::env::tunectl_in(dir)
}

/// Run tunectl on `file` in `dir` the way `run` says; (exit code, stdout, stderr).
fn run_on(dir: &Path, file: &str, run: Run) -> (Option<i32>, String, String) {
    let ledger = dir.join("ledger");
    let mut cmd = tunectl(dir);
    match run {
        Run::PlanStudy => {
            cmd.args(["plan", file, "--dry-run", "--ledger"])
                .arg(&ledger);
        }
        Run::Validate => {
            cmd.args(["validate", file]);
        }
        Run::PlanInventory => {
            std::fs::write(dir.join("study.yaml"), VALID_STUDY).expect("write study");
            cmd.args([
                "plan",
                "study.yaml",
                "--dry-run",
                "--inventory",
                file,
                "--ledger",
            ])
            .arg(&ledger);
        }
    }
    let out = cmd.output().expect("run tunectl");
    assert!(
        !ledger.exists(),
        "a refused plan must not create the ledger directory"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Problems reported for `file`: diagnostic lines start with `error: FILE`
/// (the first) or `FILE` (the others).
fn problem_lines<'a>(stderr: &'a str, file: &str) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|l| l.strip_prefix("error: ").unwrap_or(l).starts_with(file))
        .collect()
}

const CASES: &[Case] = &[
    Case {
        name: "invalid YAML syntax",
        file: "study.yaml",
        text: "name: [unclosed\nknobs: {}\n",
        run: Run::PlanStudy,
        expect: &["study.yaml:2:6: invalid YAML: "],
    },
    Case {
        name: "empty file",
        file: "study.yaml",
        text: "\n  \n",
        run: Run::PlanStudy,
        expect: &["study.yaml: the file is empty; expected a YAML mapping"],
    },
    Case {
        name: "top level is a list",
        file: "study.yaml",
        text: "- name: x\n- knobs: {}\n",
        run: Run::PlanStudy,
        expect: &["study.yaml:1:1: the top level must be a mapping (key: value)"],
    },
    Case {
        name: "unknown top-level key with a suggestion",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
measurment: {repeats: 2}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:1: measurment: unknown key `measurment` (did you mean `measurement`?)",
        ],
    },
    Case {
        name: "a template in a fingerprint tool command",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
fingerprint:
  tools:
    mytool: "{{ study_dir }}/mytool --version"
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:8:13: fingerprint.tools.mytool: tool commands are not templates (no `{{ study_dir }}` or other variable is rendered here",
        ],
    },
    Case {
        name: "a class key naming an unknown field",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
fingerprint:
  tools: {torch: "python3 -c 'import torch; print(torch.__version__)'"}
  class_key: [gpu_model, cuda]
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:8:26: fingerprint.class_key[1]: unknown class field `cuda` (known: gpu_model, gpu_memory, gpu_count, driver_major, driver_version, cpu_model, cpu_count, cuda_version, cuda_major, rocm_version, arch, os, or `tool:<name>`",
        ],
    },
    Case {
        name: "a class key naming a tool the study does not record",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
fingerprint:
  tools: {torch: "python3 -c 'import torch; print(torch.__version__)'"}
  class_key: {add: ["tool:nvcc"]}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:8:21: fingerprint.class_key.add[0]: `tool:nvcc` names no tool of `fingerprint.tools` (declare `nvcc` there",
        ],
    },
    Case {
        name: "a class key dropping a field the default key lacks",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
fingerprint:
  tools: {torch: "python3 -c 'import torch; print(torch.__version__)'"}
  class_key: {drop: [cpu_model, cuda_version]}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:8:33: fingerprint.class_key.drop[1]: `cuda_version` is not in the default key (gpu_model, gpu_memory, gpu_count, driver_major, cpu_model), so there is nothing to drop",
        ],
    },
    Case {
        name: "a trial file outside the study directory",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ x }}", files: [../run.sh]}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:4:42: trial.files[0]: `../run.sh` must be a relative path inside the study directory",
        ],
    },
    Case {
        name: "unknown key nested in a knob",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, min: 1, max: 4, stepp: 2, default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:3:34: knobs.x.stepp: unknown key `stepp` (did you mean `step`?)"],
    },
    Case {
        name: "wrong type: repeats: many",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
measurement: {repeats: many}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:24: measurement.repeats: expected an integer, found the string \"many\"",
        ],
    },
    Case {
        name: "empty knob mapping",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:3:6: knobs.x.kind: missing required key"],
    },
    Case {
        name: "empty values list",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: categorical, values: [], default: a}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:3:34: knobs.x.values: the list of values is empty"],
    },
    Case {
        name: "default not in values",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: categorical, values: [a, b], default: c}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:3:51: knobs.x.default: the default string `c` is not one of the knob's values [a, b]",
        ],
    },
    Case {
        name: "unknown knob kind",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: string, values: [a, b], default: a}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:3:13: knobs.x.kind: unknown knob kind `string` (expected categorical, int, float or bool)",
        ],
    },
    Case {
        name: "int range with max < min",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, min: 8, max: 2, default: 8}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:3:31: knobs.x.max: max 2 is smaller than min 8"],
    },
    Case {
        name: "pow2 range with a non-power of two",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, min: 4, max: 24, scale: pow2, default: 4}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:3:31: knobs.x.max: 24 is not a power of two (scale: pow2)"],
    },
    Case {
        name: "constraint that excludes the baseline",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
constraints:
  - "x > 1"
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:5:5: constraints[0]: constraint `x > 1` excludes the baseline (every knob at its default); the baseline must always be runnable",
        ],
    },
    Case {
        name: "constraint that excludes the baseline at one cell",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 2}
cells:
  n: [1, 4]
constraints:
  - "x <= n"
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:7:5: constraints[0]: constraint `x <= n` excludes the baseline (every knob at its default) at cell n=1;",
        ],
    },
    Case {
        name: "constraint naming an unknown variable",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
constraints:
  - "x <= y"
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:5:5: constraints[0]: constraint names `y`, which is neither a knob nor a cell axis (knobs: x; cells: none)",
        ],
    },
    Case {
        name: "unknown template variable in trial.command",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ threads }}"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:4:18: trial.command: unknown template variable `threads` (known: study, study_dir,",
        ],
    },
    Case {
        name: "invalid template syntax",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x "}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:4:18: trial.command: invalid template: syntax error"],
    },
    Case {
        name: "duplicate key",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
name: again
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:6:1: duplicate key `name` (first defined on line 1)"],
    },
    Case {
        name: "missing required key `trial`",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        // The position is the top-level mapping's (line 1).
        expect: &["study.yaml:1:", ": trial: missing required key"],
    },
    Case {
        name: "random strategy without count",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
strategy: {kind: random, seed: 3}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:6:12: strategy.count: missing required key"],
    },
    Case {
        name: "random strategy asking for more configs than the grid has",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
strategy: {kind: random, count: 5}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:33: strategy.count: asks for 5 random configs but the grid has only 2 besides the baseline",
        ],
    },
    Case {
        name: "gate output with ..",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
gate: {outputs: [ok.txt, ../out.txt]}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:26: gate.outputs[1]: `../out.txt` must be a relative path inside the trial directory",
        ],
    },
    Case {
        name: "knob named like a reserved variable",
        file: "study.yaml",
        text: r#"name: s
knobs:
  host: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:3:3: knobs.host: `host` is reserved for a trial variable; rename the knob",
        ],
    },
    Case {
        name: "knob named like tunectl's own template function",
        file: "study.yaml",
        text: r#"name: s
knobs:
  __tunectl_named: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ __tunectl_named }}"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:3:3: knobs.__tunectl_named: `__tunectl_named`: names starting with `__tunectl` are reserved for tunectl's own template functions; rename the knob",
        ],
    },
    Case {
        name: "cell axis named like tunectl's own template function",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
cells:
  __tunectl_x: [1]
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:5:3: cells.__tunectl_x: `__tunectl_x`: names starting with `__tunectl` are reserved for tunectl's own template functions",
        ],
    },
    Case {
        name: "knob and cell axis with the same name",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
cells:
  x: [1, 2]
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:5:3: cells.x: `x` is both a knob and a cell axis; a name can only be one",
        ],
    },
    Case {
        name: "trial.env defining a TUNECTL_ variable",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial:
  command: "echo"
  env: {TUNECTL_REPEAT: "7"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:9: trial.env.TUNECTL_REPEAT: `TUNECTL_REPEAT` is not a usable environment variable name (TUNECTL_* is reserved)",
        ],
    },
    Case {
        name: "zero timeout",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo", timeout: 0s}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:4:35: trial.timeout: must be longer than zero"],
    },
    Case {
        name: "float log scale with min <= 0",
        file: "study.yaml",
        text: r#"name: s
knobs:
  lr: {kind: float, min: 0, max: 1, count: 3, scale: log, default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:3:26: knobs.lr.min: a log scale needs min > 0"],
    },
    Case {
        name: "invalid study name",
        file: "study.yaml",
        text: r#"name: my study
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:1:7: name: `my study` is not a valid study name: use letters, digits, `-`, `_` and `.`",
        ],
    },
    Case {
        name: "hyperband without a fidelity section",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
strategy: {kind: hyperband, seed: 1}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:18: strategy.kind: hyperband needs a `fidelity:` section (min_budget, max_budget, unit) to know what budget to give a trial; add one, or use grid, random or tpe",
        ],
    },
    Case {
        name: "fidelity with min_budget not below max_budget",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x }} {{ budget }}"}
objective: {metric: t, better: higher}
fidelity:
  unit: samples
  min_budget: 5000
  max_budget: 1000
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:9:15: fidelity.max_budget: max_budget 1000 must be larger than min_budget 5000",
        ],
    },
    Case {
        name: "fidelity proxy metric not declared",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x }} {{ budget }}"}
objective: {metric: t, better: higher}
metrics:
  - {name: loss, better: lower}
fidelity:
  unit: samples
  min_budget: 100
  max_budget: 900
  metric: accuracy
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:12:11: fidelity.metric: `accuracy` is neither the objective's metric (`t`) nor declared under `metrics:` (declared: loss); the proxy metric must be one of them",
        ],
    },
    Case {
        name: "continuation without hyperband",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x }} {{ budget }}"}
objective: {metric: t, better: higher}
fidelity:
  unit: samples
  min_budget: 100
  max_budget: 900
  continuation: true
strategy: {kind: grid}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:10:17: fidelity.continuation: `continuation: true` acts between the rungs of a hyperband search; `strategy.kind: grid` runs each config once, at one budget",
        ],
    },
    Case {
        name: "inventory: unknown transport",
        file: "inventory.yaml",
        text: "hosts:\n  - name: a\n    transport: rsh\n",
        run: Run::Validate,
        expect: &[
            "inventory.yaml:3:16: hosts[0].transport: unknown transport `rsh` (expected local, ssh or slurm)",
        ],
    },
    Case {
        name: "inventory: ssh with strict_host_key_checking: no",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: a
    transport: ssh
    host: a.example.org
    strict_host_key_checking: no
"#,
        run: Run::Validate,
        expect: &[
            "inventory.yaml:5:31: hosts[0].strict_host_key_checking: `no` is not allowed: host keys are always checked (use `yes` or `accept-new`)",
        ],
    },
    Case {
        name: "inventory: ssh with strict_host_key_checking: false",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: a
    transport: ssh
    host: a.example.org
    strict_host_key_checking: false
"#,
        run: Run::PlanInventory,
        expect: &[
            "inventory.yaml:5:31: hosts[0].strict_host_key_checking: `false` is not allowed: host keys are always checked",
        ],
    },
    Case {
        name: "inventory: slurm login naming a nonexistent host",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: part
    transport: slurm
    login: nowhere
"#,
        run: Run::PlanInventory,
        expect: &[
            "inventory.yaml:4:12: hosts[0].login: no ssh host named `nowhere` in this inventory (use `local` or an ssh host's name)",
        ],
    },
    Case {
        name: "inventory: slurm login naming a local host",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: box
    transport: local
  - name: part
    transport: slurm
    login: box
"#,
        run: Run::Validate,
        expect: &["inventory.yaml:6:12: hosts[1].login: login host `box` must be an ssh host"],
    },
    Case {
        name: "inventory: duplicate host names",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: a
    transport: local
  - name: a
    transport: local
"#,
        run: Run::PlanInventory,
        // Positioned at the second host's entry (line 4).
        expect: &[
            "inventory.yaml:4:",
            ": hosts[1].name: duplicate host name `a`",
        ],
    },
    Case {
        name: "inventory: devices count differs from slots",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: a
    transport: local
    slots: 2
    devices: [0]
"#,
        run: Run::Validate,
        expect: &[
            "inventory.yaml:5:14: hosts[0].devices: lists 1 devices for 2 slots; give one device per slot",
        ],
    },
    Case {
        name: "inventory: ssh port out of range",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: a
    transport: ssh
    host: a.example.org
    port: 70000
"#,
        run: Run::Validate,
        expect: &["inventory.yaml:5:11: hosts[0].port: 70000 is not a TCP port (1-65535)"],
    },
    Case {
        name: "inventory: no hosts",
        file: "inventory.yaml",
        text: "hosts: []\n",
        run: Run::Validate,
        expect: &["inventory.yaml:1:8: hosts: the inventory lists no hosts"],
    },
    Case {
        name: "a timeout beyond any duration",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo", timeout: 1e308}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &["study.yaml:4:35: trial.timeout: `1e308` is longer than the maximum of 30 days"],
    },
    Case {
        name: "a cool_wait beyond any duration",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
measurement: {cool_wait: 1e308}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:26: measurement.cool_wait: `1e308` is longer than the maximum of 30 days",
        ],
    },
    Case {
        name: "a cool_max_wait beyond the maximum",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
measurement: {cool_max_wait: 10000h}
"#,
        run: Run::Validate,
        expect: &[
            "study.yaml:6:30: measurement.cool_max_wait: `10000h` is longer than the maximum of 30 days",
        ],
    },
    Case {
        name: "inventory: connect_timeout beyond any duration",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: a
    transport: ssh
    host: 127.0.0.1
    connect_timeout: 1e308
"#,
        run: Run::Validate,
        expect: &[
            "inventory.yaml:5:22: hosts[0].connect_timeout: `1e308` is longer than the maximum of 30 days",
        ],
    },
    Case {
        name: "inventory: poll_interval beyond the maximum",
        file: "inventory.yaml",
        text: r#"hosts:
  - name: part
    transport: slurm
    poll_interval: 31d
"#,
        run: Run::PlanInventory,
        expect: &[
            "inventory.yaml:4:20: hosts[0].poll_interval: `31d` is longer than the maximum of 30 days",
        ],
    },
    Case {
        name: "float log range reaching subnormal numbers",
        file: "study.yaml",
        text: r#"name: s
knobs:
  lr: {kind: float, min: 1e-308, max: 1e308, count: 5, scale: log, default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::Validate,
        expect: &[
            "study.yaml:3:26: knobs.lr.min: 1e-308 is too close to zero to compute with (below 2.2250738585072014e-308); use 0 or a larger number",
        ],
    },
    Case {
        name: "float range too wide to compute",
        file: "study.yaml",
        text: r#"name: s
knobs:
  w: {kind: float, min: -1e308, max: 1e308, count: 3, default: 0}
trial: {command: "echo"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:3:38: knobs.w.max: the linear range from -1e308 to 1e308 in 3 points gives the point NaN; narrow the range or lower count",
        ],
    },
    Case {
        name: "random strategy with a huge count",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, min: 0, max: 999999, default: 1}
  y: {kind: int, min: 0, max: 999999, default: 1}
trial: {command: "echo"}
objective: {metric: t, better: higher}
strategy: {kind: random, count: 100000000}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:7:33: strategy.count: asks for 100000000 configs, more than the limit of 1000000",
        ],
    },
    Case {
        name: "template with an unknown filter",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x | nosuchfilter }}"}
objective: {metric: t, better: higher}
"#,
        run: Run::Validate,
        expect: &[
            "study.yaml:4:18: trial.command: the template fails to render for the baseline: unknown filter: filter nosuchfilter is unknown",
        ],
    },
    Case {
        name: "template failing for one knob value only",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 0], default: 1}
cells: {n: [1, 2]}
trial: {command: "echo {{ 10 // x }}"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:5:18: trial.command: the template fails to render for config x=0 at cell n=1: invalid operation: unable to calculate 10 // 0",
        ],
    },
    Case {
        name: "trial.env entry failing at render time",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
cells: {n: [1, 2]}
trial:
  command: "echo {{ x }}"
  env: {A: "{{ n.bar }}"}
objective: {metric: t, better: higher}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:7:12: trial.env.A: the template fails to render for the baseline at cell n=1: undefined value: `n.bar` is undefined",
        ],
    },
    Case {
        name: "result: a regex without a capture group",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
result:
  t: {stdout: 't=[0-9]+'}
"#,
        run: Run::Validate,
        expect: &[
            "study.yaml:7:15: result.t.stdout: the regular expression must have exactly one capture group (the number), found 0",
        ],
    },
    Case {
        name: "result: an unknown key in a source",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
result:
  t: {file: o.csv, colum: ms}
"#,
        run: Run::Validate,
        expect: &["study.yaml:7:20: result.t.colum: unknown key `colum` (did you mean `column`?)"],
    },
    Case {
        name: "result: a preset that does not provide the objective",
        file: "study.yaml",
        text: r#"name: s
knobs:
  x: {kind: int, values: [1, 2, 4], default: 1}
trial: {command: "echo {{ x }}"}
objective: {metric: t, better: higher}
result: {preset: hyperfine}
"#,
        run: Run::PlanStudy,
        expect: &[
            "study.yaml:6:18: result.preset: the objective's metric `t` is not one the preset `hyperfine` provides (time, mean, median, min, max, user, system)",
        ],
    },
];

#[test]
fn every_bad_input_exits_2_with_its_positioned_message() {
    assert!(CASES.len() >= 18);
    let mut failures = Vec::new();
    for case in CASES {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(case.file), case.text).expect("write case file");
        let (code, stdout, stderr) = run_on(dir.path(), case.file, case.run);
        let mut problems = Vec::new();
        if code != Some(2) {
            problems.push(format!("exit code {code:?}, expected 2"));
        }
        for fragment in case.expect {
            if !stderr.contains(fragment) {
                problems.push(format!("stderr lacks {fragment:?}"));
            }
        }
        // One mistake, one diagnostic: no follow-on errors, no footer.
        let lines = problem_lines(&stderr, case.file);
        if lines.len() != 1 || stderr.contains("problems found") {
            problems.push(format!("expected exactly 1 problem, got {}", lines.len()));
        }
        if !stdout.is_empty() {
            problems.push(format!("stdout should be empty, got {stdout:?}"));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "case `{}` ({:?}): {}\n--- stderr:\n{stderr}",
                case.name,
                case.run,
                problems.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n\n")
    );
}

#[test]
fn unreadable_study_files_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("study.yaml")).expect("mkdir");
    for (file, message) in [
        ("missing.yaml", "missing.yaml: cannot read file: "),
        ("study.yaml", "study.yaml: cannot read file: "),
    ] {
        for run in [Run::PlanStudy, Run::Validate] {
            let (code, _, stderr) = run_on(dir.path(), file, run);
            assert_eq!(code, Some(2), "{file} {run:?}: {stderr}");
            assert!(
                stderr.contains(&format!("error: {message}")),
                "{file} {run:?}: {stderr}"
            );
        }
    }
    let (_, _, stderr) = run_on(dir.path(), "missing.yaml", Run::PlanStudy);
    assert!(stderr.contains("No such file or directory"), "{stderr}");
    let (_, _, stderr) = run_on(dir.path(), "study.yaml", Run::PlanStudy);
    assert!(
        stderr.contains("study.yaml: cannot read file: is a directory, not a regular file"),
        "{stderr}"
    );
}

#[test]
fn unreadable_inventory_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, stderr) = run_on(dir.path(), "no-inventory.yaml", Run::PlanInventory);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("error: no-inventory.yaml: cannot read file: "),
        "{stderr}"
    );
}

/// A study and an inventory that begin with a UTF-8 byte-order mark (as
/// some Windows editors write them) are read as without it: the mark is
/// not part of the first key, and positions count from after it.
#[test]
fn a_byte_order_mark_is_not_part_of_the_first_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("study.yaml"),
        format!("\u{feff}{VALID_STUDY}"),
    )
    .expect("write");
    let (code, _, stderr) = run_on(dir.path(), "study.yaml", Run::Validate);
    assert_eq!(code, Some(0), "{stderr}");
    std::fs::write(
        dir.path().join("inventory.yaml"),
        "\u{feff}hosts:\n  - name: local\n    transport: local\n",
    )
    .expect("write");
    let (code, _, stderr) = run_on(dir.path(), "inventory.yaml", Run::PlanInventory);
    assert_eq!(code, Some(0), "{stderr}");
    // A problem on the first line is placed where an editor shows it.
    std::fs::write(
        dir.path().join("bad.yaml"),
        format!("\u{feff}{}", VALID_STUDY.replacen("name:", "nmae:", 1)),
    )
    .expect("write");
    let (code, _, stderr) = run_on(dir.path(), "bad.yaml", Run::Validate);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.yaml:1:1: nmae: unknown key `nmae`"),
        "{stderr}"
    );
}

#[test]
fn several_problems_are_all_reported_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = r#"name: several
knbos: 1
knobs:
  x: {kind: int, min: 8, max: 2, default: 8}
  y: {kind: categorical, values: [a, b], default: c}
  host: {kind: bool, default: false}
trial: {command: "echo"}
objective: {metric: t, better: sideways}
measurement: {repeats: many}
gate: {outputs: [/abs/out.txt]}
"#;
    std::fs::write(dir.path().join("study.yaml"), text).expect("write");
    let expected = [
        "study.yaml:2:1: knbos: unknown key `knbos` (did you mean `knobs`?)",
        "study.yaml:4:31: knobs.x.max: max 2 is smaller than min 8",
        "study.yaml:5:51: knobs.y.default: the default string `c` is not one of the knob's values [a, b]",
        "study.yaml:6:3: knobs.host: `host` is reserved for a trial variable; rename the knob",
        "study.yaml:8:32: objective.better: expected `higher` or `lower`, found `sideways`",
        "study.yaml:9:24: measurement.repeats: expected an integer, found the string \"many\"",
        "study.yaml:10:18: gate.outputs[0]: `/abs/out.txt` must be a relative path inside the trial directory",
    ];
    for run in [Run::PlanStudy, Run::Validate] {
        let (code, stdout, stderr) = run_on(dir.path(), "study.yaml", run);
        assert_eq!(code, Some(2), "{run:?}: {stderr}");
        assert!(stdout.is_empty(), "{run:?}: {stdout}");
        for e in expected {
            assert!(stderr.contains(e), "{run:?}: missing {e:?} in:\n{stderr}");
        }
        let lines = problem_lines(&stderr, "study.yaml");
        assert_eq!(lines.len(), expected.len(), "{run:?}:\n{stderr}");
        assert!(lines[0].starts_with("error: study.yaml:"), "{stderr}");
        assert!(
            stderr
                .trim_end()
                .ends_with(&format!("\n{} problems found", expected.len())),
            "{run:?}: footer missing:\n{stderr}"
        );
    }
}

#[test]
fn problems_in_study_and_inventory_are_reported_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("study.yaml"),
        VALID_STUDY.replace("better: higher", "better: up"),
    )
    .expect("write");
    std::fs::write(
        dir.path().join("inventory.yaml"),
        "hosts:\n  - name: a\n    transport: rsh\n",
    )
    .expect("write");
    let out = tunectl(dir.path())
        .args([
            "plan",
            "study.yaml",
            "--dry-run",
            "--inventory",
            "inventory.yaml",
            "--ledger",
        ])
        .arg(dir.path().join("ledger"))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!dir.path().join("ledger").exists());
    assert!(
        stderr.contains(
            "study.yaml:6:32: objective.better: expected `higher` or `lower`, found `up`"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("inventory.yaml:3:16: hosts[0].transport: unknown transport `rsh`"),
        "{stderr}"
    );
    assert!(stderr.contains("2 problems found"), "{stderr}");
}

/// study.md: "Every problem is reported in one run". A template naming an
/// unknown variable must be reported even when another section is invalid.
#[test]
fn template_errors_are_reported_alongside_other_problems() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
trial: {command: "echo {{ z }}"}
objective: {metric: t, better: sideways}
"#;
    std::fs::write(dir.path().join("study.yaml"), text).expect("write");
    let (code, _, stderr) = run_on(dir.path(), "study.yaml", Run::PlanStudy);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("study.yaml:5:32: objective.better: expected `higher` or `lower`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("study.yaml:4:18: trial.command: unknown template variable `z`"),
        "the template error is not reported with the other one:\n{stderr}"
    );
    assert!(stderr.contains("2 problems found"), "{stderr}");
}

/// One mistake (a knob's default outside its values) must give one
/// diagnostic: the knob still exists, so constraints and templates naming it
/// are not errors.
#[test]
fn a_knob_with_a_bad_default_causes_no_follow_on_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = r#"name: s
knobs:
  x: {kind: int, values: [1, 2], default: 1}
  y: {kind: int, values: [1, 2], default: 5}
constraints: ["x <= y"]
trial: {command: "echo {{ x }} {{ y }}"}
objective: {metric: t, better: higher}
"#;
    std::fs::write(dir.path().join("study.yaml"), text).expect("write");
    let (code, _, stderr) = run_on(dir.path(), "study.yaml", Run::PlanStudy);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "study.yaml:4:43: knobs.y.default: the default integer `5` is not one of the knob's values [1, 2]"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("neither a knob nor a cell axis"),
        "`y` is a knob; this error is a follow-on of the bad default:\n{stderr}"
    );
    assert!(
        !stderr.contains("unknown template variable `y`"),
        "`y` is a knob; this error is a follow-on of the bad default:\n{stderr}"
    );
    assert_eq!(problem_lines(&stderr, "study.yaml").len(), 1, "{stderr}");
}

#[test]
fn bad_arguments_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    // clap's usage errors use exit code 2 as well.
    let out = tunectl(dir.path())
        .args([
            "plan",
            "--dry-run",
            "--bogus",
            "study.yaml",
            "--ledger",
            "ledger",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(dir.path().join("study.yaml"), VALID_STUDY).expect("write");
    let out = tunectl(dir.path())
        .args([
            "launch",
            "study.yaml",
            "--progress",
            "quiet",
            "--host",
            "nope",
        ])
        .arg("--ledger")
        .arg(dir.path().join("ledger"))
        .arg("--workdir")
        .arg(dir.path().join("work"))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "--host nope: no such host in the inventory (hosts: local; a host class of a mixed Slurm partition is named ENTRY.TAG"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("ledger").exists());
}

/// A list nested 20,000 deep used to overflow the stack (an abort, not an
/// error): it is refused with its position by every command that reads
/// YAML, before any tree is built.
#[test]
fn deeply_nested_yaml_is_refused_with_its_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let deep = format!("{VALID_STUDY}description:\n  {}x\n", "- ".repeat(20_000));
    std::fs::write(dir.path().join("study.yaml"), &deep).expect("write");
    // Line 8: the 64th `- ` (depth 65, under the top-level mapping) opens
    // at column 3 + 2·63.
    let expected = "study.yaml:8:129: lists and mappings are nested more than 64 deep";
    for run in [Run::Validate, Run::PlanStudy] {
        let (code, _, stderr) = run_on(dir.path(), "study.yaml", run);
        assert_eq!(code, Some(2), "{run:?}: {stderr}");
        assert!(stderr.contains(expected), "{run:?}: {stderr}");
    }
    // Flow style, and a tuned file given to `apply`.
    let flow = format!(
        "{VALID_STUDY}description: {}{}\n",
        "[".repeat(20_000),
        "]".repeat(20_000)
    );
    std::fs::write(dir.path().join("flow.yaml"), &flow).expect("write");
    let (code, _, stderr) = run_on(dir.path(), "flow.yaml", Run::Validate);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("error: flow.yaml:7:"), "{stderr}");
    std::fs::write(
        dir.path().join("tuned.yaml"),
        format!("study: s\nx:\n  {}1\n", "- ".repeat(20_000)),
    )
    .expect("write");
    let out = tunectl(dir.path())
        .args(["apply", "--tuned", "tuned.yaml", "--print"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tuned.yaml:3:129: lists and mappings are nested more than 64 deep"),
        "{stderr}"
    );
}

/// A NUL byte used to end the document silently: what followed it (here a
/// syntax error) was never read.
#[test]
fn a_nul_byte_is_refused_with_its_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!("{VALID_STUDY}context: {{model: a\0b}}\nbroken: [\n");
    std::fs::write(dir.path().join("study.yaml"), text).expect("write");
    for run in [Run::Validate, Run::PlanStudy] {
        let (code, _, stderr) = run_on(dir.path(), "study.yaml", run);
        assert_eq!(code, Some(2), "{run:?}: {stderr}");
        assert!(
            stderr.contains("error: study.yaml:7:19: the file contains a NUL byte"),
            "{run:?}: {stderr}"
        );
    }
}

/// A template error that only shows when it is rendered used to pass
/// `validate`, and `launch` exited 0 with no trial run.
#[test]
fn a_render_time_template_error_stops_launch() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("study.yaml"),
        VALID_STUDY.replace("echo {{ x }}", "echo {{ x.foo }}"),
    )
    .expect("write");
    let out = tunectl(dir.path())
        .args(["launch", "study.yaml", "--progress", "quiet", "--ledger"])
        .arg(dir.path().join("ledger"))
        .arg("--workdir")
        .arg(dir.path().join("work"))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "study.yaml:5:12: trial.command: the template fails to render for the baseline: undefined value: `x.foo` is undefined"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("ledger").exists());
}

#[test]
fn inventory_strings_that_would_become_script_lines_or_ssh_options_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = r#"hosts:
  - name: login
    transport: ssh
    host: "-oProxyCommand=touch_pwned"
    user: "-lroot"
    proxy_jump: "ok.example.org,-oProxyCommand=x"
  - name: login2
    transport: ssh
    host: "ssh://-oProxyCommand=x@h"
    workdir: "w\rx"
  - name: cluster
    transport: slurm
    partition: "gpu\n#SBATCH --uid=0"
    account: "a b"
    sbatch_args: ["--exclusive", "--mem=4G\ntouch pwned"]
    shared_dir: "/shared\u001b[2J"
"#;
    std::fs::write(dir.path().join("inventory.yaml"), text).expect("write");
    let (code, _, stderr) = run_on(dir.path(), "inventory.yaml", Run::Validate);
    assert_eq!(code, Some(2), "{stderr}");
    for expected in [
        "inventory.yaml:4:11: hosts[0].host: starts with `-`, which ssh would read as an option",
        "inventory.yaml:5:11: hosts[0].user: starts with `-`, which ssh would read as an option",
        "inventory.yaml:6:17: hosts[0].proxy_jump: `-oProxyCommand=x`: a user or host starting with `-` would be read by ssh as an option",
        "inventory.yaml:9:11: hosts[1].host: `ssh://-oProxyCommand=x@h`: a user or host starting with `-`",
        "inventory.yaml:10:14: hosts[1].workdir: contains the control character U+000D",
        "inventory.yaml:13:16: hosts[2].partition: contains the control character U+000A",
        "inventory.yaml:14:14: hosts[2].account: contains whitespace",
        "inventory.yaml:15:34: hosts[2].sbatch_args[1]: contains the control character U+000A",
        "inventory.yaml:16:17: hosts[2].shared_dir: contains the control character U+001B",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    assert!(stderr.contains("9 problems found"), "{stderr}");
}
