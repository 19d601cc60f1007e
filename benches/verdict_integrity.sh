#!/usr/bin/env bash
# Verdict integrity: many small studies through the real `tunectl launch`
# (local transport, one slot each) on a FAKE trial program with a known
# truth, scored per noise level (1 %, 5 %, 10 % per-sample lognormal noise):
# false wins in null studies, true wins found, studies ending all-VERDICT
# with no cell dropped, identical winners across repeats of one study,
# share of trial-seconds spent cooling down, injected 20 % slowdowns caught,
# and crash/OOM/output-changing traps never shipped. Targets are printed
# next to each figure; a benchmark, not a test: nothing fails on a figure.
#
#   benches/verdict_integrity.sh --quick             # 36 studies, ~6 minutes on 2 cores
#   benches/verdict_integrity.sh                     # 510 studies, ~1.5-2 hours
#   benches/verdict_integrity.sh --tunectl PATH      # skip the build
#   benches/verdict_integrity.sh --out FIGS.json     # figures + every study as JSON
#   benches/verdict_integrity.sh --jobs 1 --noise 0.05 --keep /tmp/vi   # one level, keep the ledgers
#
# Default JSON output: $TMPDIR/tunectl-verdict-integrity.json.
# The fake: benches/verdict_integrity/fake_bench.py; the studies, the runs
# and the scoring: benches/verdict_integrity.py; model, targets and
# results: docs/benchmarks.md.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
tunectl=${TUNECTL:-}
args=()
out=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --tunectl) tunectl=$2; shift 2 ;;
        --tunectl=*) tunectl=${1#--tunectl=}; shift ;;
        --out) out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [[ -z $tunectl ]]; then
    (cd "$here" && cargo build --release --bin tunectl --quiet)
    tunectl="${CARGO_TARGET_DIR:-$here/target}/release/tunectl"
fi
[[ -x $tunectl ]] || { echo "no tunectl binary at $tunectl" >&2; exit 1; }
out=${out:-${TMPDIR:-/tmp}/tunectl-verdict-integrity.json}

# The real interpreter, not a pyenv/asdf shim: every trial starts it.
py=$(python3 -c 'import sys; print(sys.executable)')

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "tunectl checkout $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')$(
    git -C "$here" diff --quiet HEAD -- src 2>/dev/null || echo ' (src/ modified)'), $("$tunectl" --version)," \
    "$(nproc) cpus ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $("$py" --version)"
"$py" "$here/benches/verdict_integrity.py" --tunectl "$tunectl" --python "$py" --out "$out" "${args[@]}"
echo "load average $load_start at start, $(cut -d' ' -f1-3 /proc/loadavg) at end"
