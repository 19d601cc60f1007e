#!/usr/bin/env bash
# Adaptive search on a synthetic noisy cost model: regret of the picked
# config against trial-seconds for tunectl's grid, random, Hyperband (ASHA;
# also with `fidelity.continuation`, and with `fidelity.prune` too; each also
# with `strategy.proposer: tpe`) and TPE
# (1 and 8 workers), and, in the same run, Optuna's TPESampler with its
# HyperbandPruner on the same model and budgets.
#
#   benches/search_regret.sh                       # SEEDS=20 WORKERS="1 8" VARIANTS="faithful misleading"
#   SEEDS=5 benches/search_regret.sh               # quicker
#   OPTUNA_CRASH=prune benches/search_regret.sh    # tell Optuna a crash as PRUNED, not FAIL
#   OPTUNA=0 benches/search_regret.sh              # tunectl only
#   OPTUNA_UPTO=0.34 benches/search_regret.sh      # Optuna to 1/3 of grid only (quicker)
#   KEEP=1 benches/search_regret.sh                # keep the JSON (path on stderr)
#   FINALIST_STEP=fixed benches/search_regret.sh   # finalists measured 5 times each, not raced
#
# 1. `cargo bench --bench search_regret` (benches/search_regret.rs)
#    simulates every strategy on every seed and writes every pick as JSON,
#    with the model's values and a sample of its measurements.
# 2. benches/search_regret.py checks that its copy of the model gives the
#    same values and measurements, runs Optuna (one process per CPU) for the
#    same variants and seeds up to grid's trial-seconds, and prints
#    one table per variant with the targets' verdicts.
#
# Optuna comes from PyPI into a virtual environment (OPTUNA_VENV, default
# $TMPDIR/tunectl-bench-optuna-venv, kept between runs; any venv where
# `import optuna` works is used as it is).
#
# Targets (from the issue): regret no worse than Optuna's at every budget
# from 1/27 of grid to all of it, with 1 and 8 workers, on both proxies;
# within 2 % of the optimum in >= 19 of 20 seeds at 1/9 of grid. A benchmark, not a test: nothing here fails on a figure.
# Details, model and results: docs/benchmarks.md.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
OPTUNA=${OPTUNA:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tunectl-search-regret.XXXXXX")
if [[ -z "${KEEP:-}" ]]; then
    trap 'rm -rf "$tmp"' EXIT
else
    echo "work directory: $tmp (kept)" >&2
fi

py=python3
if [[ $OPTUNA != 0 ]]; then
    OPTUNA_VENV=${OPTUNA_VENV:-${TMPDIR:-/tmp}/tunectl-bench-optuna-venv}
    if ! "$OPTUNA_VENV/bin/python" -c 'import optuna' 2>/dev/null; then
        echo "installing optuna into $OPTUNA_VENV" >&2
        python3 -m venv "$OPTUNA_VENV"
        "$OPTUNA_VENV/bin/pip" install -q optuna >&2
    fi
    py=$OPTUNA_VENV/bin/python
fi

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$EPOCHREALTIME
echo "search_regret: cargo bench --bench search_regret" >&2
(cd "$here" && SEARCH_REGRET_JSON="$tmp/rust.json" cargo bench --quiet --bench search_regret \
    > "$tmp/rust.txt")
t1=$EPOCHREALTIME
"$py" "$here/benches/search_regret.py" check "$tmp/rust.json" >&2
opt=()
if [[ $OPTUNA != 0 ]]; then
    echo "search_regret: Optuna, $(nproc) processes" >&2
    "$py" "$here/benches/search_regret.py" optuna "$tmp/rust.json" "$tmp/optuna.json" --jobs "$(nproc)"
    opt=("$tmp/optuna.json")
fi
t2=$EPOCHREALTIME
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

echo "tunectl checkout $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')$(
    git -C "$here" diff --quiet HEAD -- src 2>/dev/null || echo ' (src/ modified)'), $(rustc --version)"
echo "$(nproc) cpus ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), load average" \
    "$load_start at start, $load_end at end; tunectl side $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b - a}') s" \
    "(build included), Optuna side $(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.0f", b - a}') s"
"$py" "$here/benches/search_regret.py" table "$tmp/rust.json" "${opt[@]}"
