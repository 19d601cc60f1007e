#!/usr/bin/env bash
# Plan scaling: wall time and peak RSS of `tunectl plan --dry-run --json` on
# generated grid studies of 10^5, 3x10^5 and 10^6 configs.
#
#   benches/plan_scale.sh
#   SIZES="100000 300000 1000000 3000000" ROUNDS=5 benches/plan_scale.sh
#   TUNECTL=/path/to/tunectl benches/plan_scale.sh   # skip the build
#
# Every study has the same 6 int knobs (so the per-config work is the same at
# every size): five of 10 values and a sixth of SIZE/10^5 values; one cell,
# grid strategy, default measurement (repeats 3). Variants:
#
#   grid        no constraints, one local host (1 host class)
#   constraint  plus one knob-only constraint, which is evaluated (minijinja)
#               for every config of the grid
#   4-classes   no constraints, an inventory of 1 local + 3 ssh hosts, which
#               plan puts in 4 host classes (each class plans the whole grid)
#
# Each (variant, size) runs ROUNDS times; the table shows the median wall
# time and the largest "Maximum resident set size" of /usr/bin/time -v.
# Targets (from the issue): time linear in the number of configs, peak
# memory < 1 GiB at 10^6 configs.
set -euo pipefail

SIZES=${SIZES:-"100000 300000 1000000"}
VARIANTS=${VARIANTS:-"grid constraint 4-classes"}
ROUNDS=${ROUNDS:-3}
here=$(cd "$(dirname "$0")/.." && pwd)

if [[ -z "${TUNECTL:-}" ]]; then
    (cd "$here" && cargo build --release --bin tunectl --quiet)
    TUNECTL="${CARGO_TARGET_DIR:-$here/target}/release/tunectl"
fi
[[ -x "$TUNECTL" ]] || { echo "no tunectl binary at $TUNECTL" >&2; exit 1; }

if ! /usr/bin/time -v true >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing GNU time (apt-get install -y time)" >&2
        apt-get install -y -qq time >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq time >/dev/null 2>&1; }
    fi
    /usr/bin/time -v true >/dev/null 2>&1 || { echo "GNU time (/usr/bin/time -v) is required" >&2; exit 1; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tunectl-plan-scale.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

study() { # $1 = configs, $2 = variant
    local n=$1 last=$(($1 / 100000))
    if ((n % 100000 != 0 || n < 100000)); then
        echo "SIZES must be multiples of 100000 (got $n)" >&2; exit 1
    fi
    cat <<EOF
name: plan-scale
knobs:
  a: {kind: int, min: 0, max: 9, default: 0}
  b: {kind: int, min: 0, max: 9, default: 0}
  c: {kind: int, min: 0, max: 9, default: 0}
  d: {kind: int, min: 0, max: 9, default: 0}
  e: {kind: int, min: 0, max: 9, default: 0}
  f: {kind: int, min: 0, max: $((last - 1)), default: 0}
trial:
  command: "bench --a {{ a }} --b {{ b }} --c {{ c }} --d {{ d }} --e {{ e }} --f {{ f }} --out {{ result }}"
objective: {metric: t, better: lower}
EOF
    if [[ $2 == constraint ]]; then
        # True for every config: nothing is pruned, but every config is evaluated.
        printf 'constraints:\n  - "a + b + c < 100"\n'
    fi
}

cat > "$tmp/local.yaml" <<'EOF'
hosts:
  - {name: local, transport: local, slots: 1}
EOF
cat > "$tmp/fleet.yaml" <<'EOF'
hosts:
  - {name: local, transport: local, slots: 1}
  - {name: gpu-a, transport: ssh, host: gpu-a.example.org, slots: 8}
  - {name: gpu-b, transport: ssh, host: gpu-b.example.org, slots: 8}
  - {name: gpu-c, transport: ssh, host: gpu-c.example.org, slots: 8}
EOF

results=()
echo "plan_scale: sizes $SIZES, variants $VARIANTS, $ROUNDS rounds, $(nproc) cpus" >&2
for v in $VARIANTS; do
    inv="$tmp/local.yaml"; [[ $v == 4-classes ]] && inv="$tmp/fleet.yaml"
    for n in $SIZES; do
        study "$n" "$v" > "$tmp/study.yaml"
        walls=() rss=0
        for ((r = 1; r <= ROUNDS; r++)); do
            t0=$EPOCHREALTIME
            /usr/bin/time -v -o "$tmp/time.txt" "$TUNECTL" plan "$tmp/study.yaml" \
                --inventory "$inv" --ledger "$tmp/no-ledger" --dry-run --json > "$tmp/plan.json"
            t1=$EPOCHREALTIME
            python3 - "$tmp/plan.json" "$n" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
assert int(plan["grid_configs"]) == n, plan["grid_configs"]
assert plan["cells"][0]["configs"] == n, plan["cells"][0]
EOF
            w=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b - a}')
            m=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time.txt")
            walls+=("$w"); ((m > rss)) && rss=$m
            printf '  %-11s %8d configs  round %d  %7.3f s  %7d KB\n' "$v" "$n" "$r" "$w" "$m" >&2
        done
        med=$(printf '%s\n' "${walls[@]}" | sort -g | awk '{v[NR]=$1} END{print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}')
        results+=("$v $n $med $rss")
    done
done

echo
echo "tunectl $("$TUNECTL" --version | awk '{print $2}'), $(nproc) cpus, $ROUNDS rounds; wall = median, RSS = max of /usr/bin/time -v"
printf '%-11s %9s %9s %12s %10s %10s\n' variant configs "wall s" "us/config" "RSS MiB" "B/config"
for line in "${results[@]}"; do
    read -r v n w rss <<< "$line"
    awk -v v="$v" -v n="$n" -v w="$w" -v r="$rss" 'BEGIN{
        printf "%-11s %9d %9.3f %12.3f %10.1f %10.1f\n", v, n, w, w / n * 1e6, r / 1024, r * 1024 / n }'
done
echo
# Linearity: the marginal cost between consecutive sizes should be flat.
for v in $VARIANTS; do
    printf '%s\n' "${results[@]}" | awk -v v="$v" '$1 == v' | awk -v v="$v" '
        NR > 1 { printf "%-11s %7d -> %7d configs: marginal %.3f us/config, %.1f B/config\n",
                 v, pn, $2, ($3 - pw) / ($2 - pn) * 1e6, ($4 - pr) * 1024 / ($2 - pn) }
        { pn = $2; pw = $3; pr = $4 }'
done
echo
printf '%s\n' "${results[@]}" | awk '$2 == 1000000 {
    printf "peak RSS at 10^6 configs (%s): %.1f MiB -> target < 1 GiB %s\n", $1, $4 / 1024, ($4 < 1048576) ? "met" : "NOT met" }'
