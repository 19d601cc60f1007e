#!/usr/bin/env bash
# The differential test of command templates, at length (not a timed test):
# generated templates that mix quotes, `#`, `$` forms, backslashes,
# backticks, newlines and here-documents around `{{ v }}` holes are loaded
# as a study's trial.command, rendered with values that are shell code, and
# run under every shell installed (dash, bash --posix, busybox sh); it
# fails on the first value that runs (a marker file appears) or whose text
# is in a command. The test suite runs 64 cases of it, one shell process a
# command (tests/it/props.rs, no_value_runs_under_any_shell_whatever_the_template);
# this runs the batched variant (no_value_runs_under_any_shell_batched):
# 250 templates to a shell process, each command in a subshell of its own
# read by `eval`, with a control that must run (docs/fuzzing.md).
#
#   benches/shell_differential.sh [CASES] [SEED]    default: 20000 1
#
# About 230 templates a second on an idle 2-core machine, 2.7 times the
# suite's one-process-a-command form (shell processes set the pace; the
# debug build of the tests is reused). Exit status: that of the test (non-zero on a
# finding, with the template, the value and the shell).
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-20000}
seed=${2:-1}
echo "shell differential: $cases generated templates, seed $seed, at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+changes')" >&2
TUNECTL_SHELL_CASES=$cases TUNECTL_SHELL_SEED=$seed cargo test --quiet --test it \
    props::no_value_runs_under_any_shell_batched -- --ignored --nocapture
