//! The FAKE trial program of the integration tests: one POSIX sh script,
//! [`FAKE_TRIAL`], written into a study directory as `fake-trial.sh` (see
//! [`write`]). It measures nothing: every number it reports is made up from
//! a known profile, so each test knows which config must win, crash or be
//! rejected. It keeps tunectl's trial contract (docs/trial-contract.md): it
//! reads `TUNECTL_*`, writes `out.txt` and `values.json` in its working
//! directory and the result to `$TUNECTL_RESULT`, and exits 0, unless its
//! mode fails on purpose.
//!
//! # Usage
//!
//! `sh {{ study_dir }}/fake-trial.sh MODE [N]`: MODE is a profile (below),
//! N the cell (default 1). Further arguments are ignored.
//!
//! # Speed
//!
//! A run reports `FAKE_SAMPLES` samples (default 1) of the metric
//! `throughput` (ops/s, higher is better), each
//!
//! ```text
//! T × HEAT × (1 + FAKE_TRIAL_NOISE × v) × (1 + FAKE_NOISE × u) + REPEAT / 10
//! ```
//!
//! - `T` is 100 × the mode's speed (table below), or the search profile;
//! - `HEAT` is 0.7 while the host is "hot" (see Heat), else 1;
//! - `u` is uniform in [-1, 1], one per sample, from a Park-Miller sequence
//!   seeded with the cksum of `FAKE_SEED`, `$TUNECTL_KNOBS`, `$TUNECTL_CELL`,
//!   `$TUNECTL_REPEAT`, `$TUNECTL_ROLE` and `$TUNECTL_PHASE`: deterministic,
//!   and the same on every machine (the trial key is left out: it holds the
//!   host class);
//! - `v` is uniform in [-1, 1], one per run, from a second Park-Miller
//!   sequence seeded with the same inputs and the word `run`: runs of a real
//!   benchmark differ by more than their samples show. It is seeded, not
//!   random, so that a test's outcome is the same on every run and machine
//!   (the benchmarks, not the tests, measure how often noise misleads);
//! - `REPEAT` is `$TUNECTL_REPEAT`, so the repeats of a noise-free config
//!   still differ a little (100.0, 100.1, 100.2: a spread to compute).
//!
//! `FAKE_NOISE` and `FAKE_TRIAL_NOISE` default to 0. `FAKE_FIRST_SAMPLE`, when
//! set, is written verbatim as the first sample instead (a value speedups
//! cannot use: `0`, `-2`, `5e-324`).
//!
//! | MODE | speed | besides |
//! |------|-------|---------|
//! | `base`, `equal`, `a0b0`, `a0b1` | 1 | |
//! | `lag` | 0.95 | |
//! | `slow` | 0.5 | |
//! | `quick`, `wrong`, `close`, `far` | 1.5 | see Outputs |
//! | `fast`, `a1b0` | 2 | |
//! | `a1b1` | 2.1 | |
//! | `lopsided` | 2 at N < 3, 0.8 at N ≥ 3 | |
//! | `sweeponly` | 1.5 when `$TUNECTL_ROLE` is `sweep`, else 1 | |
//!
//! `FAKE_SPEEDS` overrides the table: words `MODE=SPEED`, `MODE@N=SPEED`
//! (at cell N only) or `MODE:ROLE=SPEED` (in runs of that
//! `$TUNECTL_ROLE` only), later words winning; e.g. `fast@2=0.9 wrong=3
//! fast:confirm=1.04`.
//!
//! **Search profile** (modes `search` and `search-proxy`, for adaptive
//! searches over int knobs `a`, `b`, `c` in 0..4 read from
//! `TUNECTL_KNOB_A`...; budget `B` = `$TUNECTL_BUDGET`, 27 when empty):
//! `T = 1000 - 10 × ((a-3)² + (b-1)² + (c-2)²)`, optimum a=3 b=1 c=2; at
//! `B < 27` plus a config-dependent bias `((7a + 3b + c) mod 5) × 60 / B`
//! (integer division), so small budgets rank a little differently (an
//! imperfect proxy); at N = 2, configs with c=3 get 25 more (cells rank
//! differently). `search-proxy` stands for a search's screening command,
//! `search` for its objective command: they differ only with `FAKE_TRAP=1`,
//! where a=4 b=4 c=4 reports T = 2000 as `search-proxy` and 500 as
//! `search` (best on the proxy, worse than the baseline on the objective).
//!
//! # Failures
//!
//! | MODE | what happens |
//! |------|--------------|
//! | `crash` | `fake-trial: mode crash: giving up on purpose` on stderr, exit 3 |
//! | `compile` | warm-up runs pass (speed 1); a measured run prints a TorchDynamo traceback ending in `BackendCompilerFailed`, exit 1 |
//! | `oom` | `torch.OutOfMemoryError: CUDA out of memory ...` on stderr, exit 1 |
//! | `killed` | exit 137 |
//! | `hang` | ignores SIGTERM, writes its pid to `hang.pid` and its child's (`sleep 30`) to `hang-child.pid`, waits on the child |
//! | `garbled` | a stderr line full of terminal escapes (`ESC[2J`, an OSC title, a C1 CSI), exit 3 |
//! | search profile | a=4 c=0 at `B ≥ 27`: out of memory as `oom` |
//! | anything else | `fake-trial: unknown mode MODE` on stderr, exit 64 |
//!
//! Untrusted files, each after a normal run: `fifo-result` (the result
//! file is a FIFO), `zero-result` (a symlink to /dev/zero), `big-result`
//! (9,000,022 bytes: spaces before the result), `fifo-output`,
//! `zero-output`, `dir-output` (`out.txt` is a FIFO, a symlink to
//! /dev/zero, a directory), `link-output` (`out.txt` is a symlink to a
//! regular file with the usual content).
//!
//! # Outputs
//!
//! `out.txt` holds `sum(N) = 7N`; `wrong`, and the search profile at b=3,
//! write `sum(N) = 4242` instead (the output changed). `values.json` holds
//! `[1.0, 2.0, 3.0]`; `close` writes `[1.0001, 2.0, 3.0]` (within an rtol of
//! 1e-3), `far` `[1.01, 2.0, 3.0]` (beyond it).
//!
//! # Time
//!
//! - `FAKE_SLEEP=S`: a measured run (`$TUNECTL_PHASE` measure) first creates
//!   `sleeping` next to the script, then sleeps S seconds; only at cell
//!   `FAKE_SLEEP_N`, mode `FAKE_SLEEP_MODE`, role `FAKE_SLEEP_ROLE` and
//!   repeats from `FAKE_SLEEP_FROM_REPEAT` on when those are set;
//! - `FAKE_JITTER=1`: every run first sleeps 0 to 0.09 s, so results arrive
//!   out of order.
//!
//! # Printing given text
//!
//! `FAKE_PRINT_STDOUT=FILE`, `FAKE_PRINT_STDERR=FILE`: every run, right
//! after its log line (below), copies FILE byte for byte to its stdout or
//! stderr. Otherwise a run prints nothing on stdout, and on stderr only
//! what its mode says; so with a mode that prints nothing (`base`) the
//! stream is exactly FILE (a test places text, a credential say, at a
//! known offset of the stream).
//!
//! # Heat
//!
//! With `FAKE_HEAT_AT=K`, measured runs are counted in `count` next to the
//! script; the K-th creates `hot` holding `FAKE_HEAT_RUNS` (default 0); while
//! `hot` exists every measured run is hot (`HEAT` 0.7) and counts it down,
//! removing it at 0 (`FAKE_HEAT_RUNS=0`: the heat never goes away). One slot
//! at a time: the count is not locked.
//!
//! # Log
//!
//! Every run, first of all, appends one line to `runs.log` next to the
//! script: `mode= n= repeat= role= phase= hot= budget= trial= attempt=
//! knobs=` (the trial key, attempt id and `$TUNECTL_KNOBS` last). [`runs`]
//! reads it.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

/// File name of the fake in a study directory.
pub const FILE: &str = "fake-trial.sh";

/// Variables the fake reads: a test clears them from the environment it
/// inherits, so that only what a test sets reaches the fake.
pub const VARS: [&str; 17] = [
    "FAKE_SAMPLES",
    "FAKE_NOISE",
    "FAKE_TRIAL_NOISE",
    "FAKE_SEED",
    "FAKE_FIRST_SAMPLE",
    "FAKE_SPEEDS",
    "FAKE_TRAP",
    "FAKE_SLEEP",
    "FAKE_SLEEP_N",
    "FAKE_SLEEP_MODE",
    "FAKE_SLEEP_ROLE",
    "FAKE_SLEEP_FROM_REPEAT",
    "FAKE_JITTER",
    "FAKE_HEAT_AT",
    "FAKE_HEAT_RUNS",
    "FAKE_PRINT_STDOUT",
    "FAKE_PRINT_STDERR",
];

/// The program (its contract is this module's documentation).
pub const FAKE_TRIAL: &str = r#"#!/bin/sh
# FAKE trial program of tunectl's integration tests: it measures nothing and
# reports made-up numbers from a known profile. Its contract is documented in
# tests/it/support/fake.rs.
set -u
here=$(dirname "$0")
mode=${1:?usage: fake-trial.sh MODE [N]}
n=${2:-1}
repeat=${TUNECTL_REPEAT:-0}
role=${TUNECTL_ROLE:-sweep}
phase=${TUNECTL_PHASE:-measure}
budget=${TUNECTL_BUDGET:-}
hot=0
if [ "$phase" = measure ] && [ -n "${FAKE_HEAT_AT:-}" ]; then
    count=$(( $(cat "$here/count" 2>/dev/null || echo 0) + 1 ))
    echo "$count" > "$here/count"
    if [ "$count" = "$FAKE_HEAT_AT" ]; then
        echo "${FAKE_HEAT_RUNS:-0}" > "$here/hot"
    fi
    if [ -f "$here/hot" ]; then
        hot=1
        left=$(cat "$here/hot")
        if [ "$left" -gt 0 ]; then
            left=$((left - 1))
            if [ "$left" = 0 ]; then rm -f "$here/hot"; else echo "$left" > "$here/hot"; fi
        fi
    fi
fi
echo "mode=$mode n=$n repeat=$repeat role=$role phase=$phase hot=$hot budget=$budget trial=${TUNECTL_TRIAL_ID:-} attempt=${TUNECTL_ATTEMPT_ID:-} knobs=${TUNECTL_KNOBS:-}" >> "$here/runs.log"
if [ -n "${FAKE_PRINT_STDOUT:-}" ]; then cat "$FAKE_PRINT_STDOUT"; fi
if [ -n "${FAKE_PRINT_STDERR:-}" ]; then cat "$FAKE_PRINT_STDERR" >&2; fi
if [ "${FAKE_JITTER:-}" = 1 ]; then
    d=$(od -An -N1 -tu1 /dev/urandom | tr -dc 0-9 | cut -c1)
    sleep "0.0${d:-0}"
fi
if [ "$phase" = measure ] && [ -n "${FAKE_SLEEP:-}" ] \
    && [ "${FAKE_SLEEP_N:-$n}" = "$n" ] \
    && [ "${FAKE_SLEEP_MODE:-$mode}" = "$mode" ] \
    && [ "${FAKE_SLEEP_ROLE:-$role}" = "$role" ] \
    && [ "$repeat" -ge "${FAKE_SLEEP_FROM_REPEAT:-0}" ]; then
    : > "$here/sleeping"
    sleep "$FAKE_SLEEP"
fi
oom() {
    echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB" >&2
    exit 1
}
out="sum($n) = $((n * 7))"
values="[1.0, 2.0, 3.0]"
scale=100
case $mode in
    base | equal | a0b0 | a0b1) speed=1 ;;
    lag) speed=0.95 ;;
    slow) speed=0.5 ;;
    quick) speed=1.5 ;;
    fast | a1b0) speed=2 ;;
    a1b1) speed=2.1 ;;
    lopsided) if [ "$n" -lt 3 ]; then speed=2; else speed=0.8; fi ;;
    sweeponly) if [ "$role" = sweep ]; then speed=1.5; else speed=1; fi ;;
    wrong) speed=1.5; out="sum($n) = 4242" ;;
    close) speed=1.5; values="[1.0001, 2.0, 3.0]" ;;
    far) speed=1.5; values="[1.01, 2.0, 3.0]" ;;
    search | search-proxy)
        a=$TUNECTL_KNOB_A
        b=$TUNECTL_KNOB_B
        c=$TUNECTL_KNOB_C
        B=${budget:-27}
        tp=$((1000 - 10 * ((a - 3) * (a - 3) + (b - 1) * (b - 1) + (c - 2) * (c - 2))))
        if [ "$B" -lt 27 ]; then
            tp=$((tp + ((7 * a + 3 * b + c) % 5) * 60 / B))
        fi
        if [ "$n" = 2 ] && [ "$c" -eq 3 ]; then tp=$((tp + 25)); fi
        if [ "${FAKE_TRAP:-}" = 1 ] && [ "$a$b$c" = 444 ]; then
            if [ "$mode" = search-proxy ]; then tp=2000; else tp=500; fi
        fi
        if [ "$a" -eq 4 ] && [ "$c" -eq 0 ] && [ "$B" -ge 27 ]; then oom; fi
        if [ "$b" -eq 3 ]; then out="sum($n) = 4242"; fi
        scale=$tp
        speed=1
        ;;
    fifo-result | zero-result | big-result | fifo-output | zero-output | dir-output | link-output)
        speed=1
        ;;
    crash)
        echo "fake-trial: mode crash: giving up on purpose" >&2
        exit 3
        ;;
    compile)
        if [ "$phase" = measure ]; then
            echo "Traceback (most recent call last):" >&2
            echo '  File "bench.py", line 12, in <module>' >&2
            echo "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:" >&2
            echo "RuntimeError: Triton Error [CUDA]: invalid argument" >&2
            exit 1
        fi
        speed=1
        ;;
    oom) oom ;;
    killed) exit 137 ;;
    hang)
        trap '' TERM
        echo $$ > "$here/hang.pid"
        sleep 30 &
        echo $! > "$here/hang-child.pid"
        wait
        exit 0
        ;;
    garbled)
        printf 'fatal: \033[2J\033]0;pwned\007 \302\233 gone\n' >&2
        exit 3
        ;;
    *)
        echo "fake-trial: unknown mode $mode" >&2
        exit 64
        ;;
esac
for word in ${FAKE_SPEEDS:-}; do
    case $word in
        "$mode="* | "$mode@$n="* | "$mode:$role="*) speed=${word#*=} ;;
    esac
done
h=$(printf '%s|%s|%s|%s|%s|%s' "${FAKE_SEED:-0}" "${TUNECTL_KNOBS:-}" "${TUNECTL_CELL:-}" \
    "$repeat" "$role" "$phase" | cksum | cut -d' ' -f1)
r=$(printf '%s|%s|%s|%s|%s|%s|run' "${FAKE_SEED:-0}" "${TUNECTL_KNOBS:-}" "${TUNECTL_CELL:-}" \
    "$repeat" "$role" "$phase" | cksum | cut -d' ' -f1)
samples=$(awk -v h="$h" -v scale="$scale" -v speed="$speed" -v hot="$hot" \
    -v noise="${FAKE_NOISE:-0}" -v tn="${FAKE_TRIAL_NOISE:-0}" -v r="$r" \
    -v k="${FAKE_SAMPLES:-1}" -v repeat="$repeat" -v first="${FAKE_FIRST_SAMPLE:-}" 'BEGIN {
    t = scale * speed
    if (hot) t = t * 0.7
    y = (r % 2147483647 * 16807) % 2147483647; if (y == 0) y = 1
    t = t * (1 + tn * (2 * y / 2147483647 - 1))
    x = h % 2147483647; if (x == 0) x = 1
    out = ""
    for (i = 0; i < k; i++) {
        x = (x * 16807) % 2147483647
        u = 2 * x / 2147483647 - 1
        v = sprintf("%.4f", t * (1 + noise * u) + repeat / 10)
        if (i == 0 && first != "") v = first
        out = out (i ? ", " : "") v
    }
    print out
}')
echo "$out" > out.txt
echo "$values" > values.json
printf '{"metrics": {"throughput": [%s]}}\n' "$samples" > "$TUNECTL_RESULT"
case $mode in
    fifo-result) rm -f "$TUNECTL_RESULT"; mkfifo "$TUNECTL_RESULT" ;;
    zero-result) rm -f "$TUNECTL_RESULT"; ln -s /dev/zero "$TUNECTL_RESULT" ;;
    big-result)
        size=$(wc -c < "$TUNECTL_RESULT")
        { head -c $((9000022 - size)) /dev/zero | tr '\0' ' '; cat "$TUNECTL_RESULT"; } > big.json
        mv big.json "$TUNECTL_RESULT"
        ;;
    fifo-output) rm out.txt; mkfifo out.txt ;;
    zero-output) rm out.txt; ln -s /dev/zero out.txt ;;
    dir-output) rm out.txt; mkdir out.txt ;;
    link-output) mv out.txt real.txt; ln -s real.txt out.txt ;;
esac
"#;

/// Write the fake into `dir` as [`FILE`]; its path.
pub fn write(dir: &Path) -> PathBuf {
    let path = dir.join(FILE);
    std::fs::write(&path, FAKE_TRIAL).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// One line of the fake's `runs.log`: one run, warm-ups included.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub mode: String,
    pub n: String,
    pub repeat: u64,
    pub role: String,
    pub phase: String,
    pub hot: bool,
    pub budget: String,
    pub trial: String,
    pub attempt: String,
    /// `$TUNECTL_KNOBS` (JSON null when it was not set).
    pub knobs: Json,
}

impl Run {
    pub fn measured(&self) -> bool {
        self.phase == "measure"
    }

    /// The value of int knob `name`.
    pub fn knob(&self, name: &str) -> i64 {
        self.knobs[name]
            .as_i64()
            .unwrap_or_else(|| panic!("no int knob {name} in {self:?}"))
    }
}

/// The runs logged by the fake written into `dir`, in order.
pub fn runs(dir: &Path) -> Vec<Run> {
    let Ok(text) = std::fs::read_to_string(dir.join("runs.log")) else {
        return Vec::new();
    };
    text.lines().map(parse).collect()
}

fn parse(line: &str) -> Run {
    // `knobs=` is last: its JSON may hold spaces.
    let (head, knobs) = line
        .split_once(" knobs=")
        .unwrap_or_else(|| panic!("not a line of the fake's log: {line:?}"));
    let mut fields = std::collections::BTreeMap::new();
    for word in head.split(' ') {
        let (k, v) = word
            .split_once('=')
            .unwrap_or_else(|| panic!("{word:?} in the fake's log line {line:?}"));
        fields.insert(k, v.to_string());
    }
    let mut take = |k: &str| {
        fields
            .remove(k)
            .unwrap_or_else(|| panic!("no {k}= in the fake's log line {line:?}"))
    };
    Run {
        mode: take("mode"),
        n: take("n"),
        repeat: take("repeat")
            .parse()
            .unwrap_or_else(|e| panic!("repeat in {line:?}: {e}")),
        role: take("role"),
        phase: take("phase"),
        hot: take("hot") == "1",
        budget: take("budget"),
        trial: take("trial"),
        attempt: take("attempt"),
        knobs: if knobs.is_empty() {
            Json::Null
        } else {
            serde_json::from_str(knobs).unwrap_or_else(|e| panic!("knobs in {line:?}: {e}"))
        },
    }
}
