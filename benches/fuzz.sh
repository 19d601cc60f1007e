#!/usr/bin/env bash
# Fuzz tunectl's input parsers for a set time (not a timed test).
#
#   benches/fuzz.sh [TARGET|all] [SECONDS]      default: all 60
#
# Targets: study inventory result tuned ledger template (docs/fuzzing.md).
# Prints, per target, the executions, exec/s and findings (panics, hangs,
# aborts; known crashes fixed elsewhere are counted apart). Each crashing
# input is saved under target/fuzz-findings/<target>/ (override with
# FUZZ_FINDINGS=dir), with a .txt beside it saying what happened; turn it
# into a regression case under tests/fixtures/fuzz/<target>/.
# Extra arguments after SECONDS go to the fuzzer (--seed N, --run-known).
# Exit status: 1 when there is a new finding.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-all}
seconds=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
findings=${FUZZ_FINDINGS:-target/fuzz-findings}
echo "fuzzing $target for ${seconds}s per target at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+changes')" >&2
cargo bench --bench fuzz --quiet -- "$target" --seconds "$seconds" --findings "$findings" "$@"
