#!/usr/bin/env bash
# $CMD and the job strings are shell code run by a child shell, on purpose:
# shellcheck disable=SC2016,SC2089,SC2090
# Dispatch overhead: N no-op trials on S local slots, tunectl vs GNU parallel
# vs a serial shell loop (the floor), all in the same run.
#
#   benches/dispatch.sh                      # 1000 trials, 2 slots, 3 rounds
#   TRIALS=1000 SLOTS=2 ROUNDS=5 benches/dispatch.sh
#   TUNECTL=/path/to/tunectl benches/dispatch.sh   # skip the build
#
# Every trial is the same no-op that still honours the trial contract: it
# writes {"metrics":{"t":1}} to "$TUNECTL_RESULT" (docs/trial-contract.md).
#
# - tunectl:  `tunectl launch` of a generated study (one int knob `i` with
#             TRIALS values, grid, warmup 0, repeats 1 -> exactly TRIALS
#             trials) on an inventory with one local host of SLOTS slots,
#             fresh ledger and work directory each round.
# - parallel: GNU parallel -jSLOTS running the same TRIALS commands; each job
#             makes its own fresh directory, cds there, runs the command with
#             `sh -c` and TUNECTL_RESULT set, reads the result and removes the
#             directory (what tunectl does per attempt, minus the ledger).
# - parallel-bare: GNU parallel -jSLOTS --ungroup running `sh -c CMD` with
#             TUNECTL_RESULT pointing at a per-job file in one shared directory
#             (no per-job directory, no output grouping): GNU parallel's own
#             lower bound, the most favourable comparison for it.
# - parallel-true: `parallel -jSLOTS --ungroup true ::: 0..TRIALS-1`: GNU
#             parallel starting the bare no-op `true`, no result file, no
#             directory, no output grouping (the issue's bare peer).
# - xargs-true: `xargs -PSLOTS -n1 true` over the same TRIALS arguments: the
#             cheapest parallel fork/exec loop there is.
# - serial:   a bash loop doing the same per-job work as `parallel`, one at a
#             time (slots = 1): the cost of the processes alone.
#
# Per-trial overhead = wall x slots / trials (the slot-time each trial costs
# beyond nothing; the no-op itself is ~1 ms of `sh`). Rounds are interleaved
# (tunectl, parallel, parallel-bare, serial, tunectl, ...) so that background
# noise hits all of them alike; the table shows the median and the minimum.
set -euo pipefail

TRIALS=${TRIALS:-1000}
SLOTS=${SLOTS:-2}
ROUNDS=${ROUNDS:-3}
here=$(cd "$(dirname "$0")/.." && pwd)

if [[ -z "${TUNECTL:-}" ]]; then
    (cd "$here" && cargo build --release --bin tunectl --quiet)
    TUNECTL="${CARGO_TARGET_DIR:-$here/target}/release/tunectl"
fi
[[ -x "$TUNECTL" ]] || { echo "no tunectl binary at $TUNECTL" >&2; exit 1; }

if ! command -v parallel >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing GNU parallel (apt-get install -y parallel)" >&2
        apt-get install -y -qq parallel >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq parallel >/dev/null 2>&1; }
    fi
    command -v parallel >/dev/null 2>&1 || { echo "GNU parallel is required" >&2; exit 1; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tunectl-dispatch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The trial command, as the study's template and as the shell sees it.
CMD='printf '"'"'{"metrics":{"t":1}}'"'"' > "$TUNECTL_RESULT"'

cat > "$tmp/study.yaml" <<EOF
name: dispatch-bench
knobs:
  i: {kind: int, min: 0, max: $((TRIALS - 1)), default: 0}
trial:
  command: '$(printf '%s' "$CMD" | sed "s/'/''/g")'
objective: {metric: t, better: lower}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
EOF
cat > "$tmp/inventory.yaml" <<EOF
hosts:
  - name: local
    transport: local
    slots: $SLOTS
EOF

# Per-job work shared by `parallel` and `serial`: $1 = job index.
cat > "$tmp/job.sh" <<'EOF'
d="$W/$1"
mkdir "$d" && cd "$d" || exit 1
TUNECTL_RESULT="$d/tunectl-result.json" sh -c "$CMD" || exit 1
read -r _ < "$d/tunectl-result.json" || true
cd "$W" && rm -rf "$d"
EOF
export CMD

now() { echo "$EPOCHREALTIME"; }

# Each runner gets fresh, empty directories made before the clock starts
# ($tmp/<runner>.<round>/) and removed after it stops.
run_tunectl() {
    local d=$1
    "$TUNECTL" launch "$tmp/study.yaml" --inventory "$tmp/inventory.yaml" \
        --ledger "$d/ledger" --workdir "$d/work" --progress quiet \
        > "$d.out" 2> "$d.err" || {
        # Exit 3: every bucket is a DRAFT, as it must be with one sample
        # per config (docs/cli.md); the dispatch itself went through.
        local rc=$?
        [[ $rc == 3 ]] || { cat "$d.err" >&2; return 1; }
    }
}

run_parallel() {
    W="$1" parallel -j"$SLOTS" --halt now,fail=1 \
        bash "$tmp/job.sh" {} ::: $(seq 0 $((TRIALS - 1)))
}

run_parallel_bare() {
    (cd "$1" && parallel -j"$SLOTS" --ungroup --halt now,fail=1 \
        'TUNECTL_RESULT=r{}.json sh -c "$CMD"' ::: $(seq 0 $((TRIALS - 1))))
}

run_parallel_true() {
    (cd "$1" && parallel -j"$SLOTS" --ungroup --halt now,fail=1 true ::: $(seq 0 $((TRIALS - 1))))
}

run_xargs_true() {
    (cd "$1" && seq 0 $((TRIALS - 1)) | xargs -P"$SLOTS" -n1 true)
}

run_serial() {
    local i
    for ((i = 0; i < TRIALS; i++)); do
        # shellcheck disable=SC1091,SC2034  # job.sh reads W and $1
        (W="$1"; set -- "$i"; . "$tmp/job.sh")
    done
}

# Check that a runner really ran every trial.
check() {
    local n=$1 d=$2
    case $n in
        tunectl)
            grep -q "ran $TRIALS trials ($TRIALS ok" "$d.err" ||
                { echo "tunectl did not run $TRIALS ok trials:" >&2; cat "$d.err" >&2; return 1; }
            [[ $(find "$d/ledger" -name '*.json' -path '*/trials/*' | wc -l) == "$TRIALS" ]] ;;
        parallel | serial) [[ -z "$(ls -A "$d")" ]] ;;
        parallel-bare) [[ $(find "$d" -name 'r*.json' | wc -l) == "$TRIALS" ]] ;;
        parallel-true | xargs-true) true ;;
    esac || { echo "$n: wrong outcome in $d" >&2; return 1; }
}

declare -A walls med min
names=(tunectl parallel parallel-bare parallel-true xargs-true serial)
fstype=$(df -T "$tmp" | awk 'NR == 2 {print $2}')
echo "dispatch: $TRIALS no-op trials, $SLOTS slots, $ROUNDS rounds, $(nproc) cpus, files in $tmp ($fstype)" >&2
for ((r = 1; r <= ROUNDS; r++)); do
    for n in "${names[@]}"; do
        d="$tmp/$n.$r"
        mkdir "$d"
        t0=$(now)
        case $n in
            tunectl) run_tunectl "$d" ;;
            parallel) run_parallel "$d" ;;
            parallel-bare) run_parallel_bare "$d" ;;
            parallel-true) run_parallel_true "$d" ;;
            xargs-true) run_xargs_true "$d" ;;
            serial) run_serial "$d" ;;
        esac
        t1=$(now)
        check "$n" "$d"
        rm -rf "$d" "$d.out" "$d.err"
        w=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
        walls[$n]+="$w "
        printf '  round %d  %-14s %8.3f s\n' "$r" "$n" "$w" >&2
    done
done

echo
echo "tunectl $("$TUNECTL" --version | awk '{print $2}'), $(parallel --version | head -1), $(nproc) cpus, $TRIALS trials, $ROUNDS rounds, $fstype"
printf '%-14s %5s %12s %10s %18s %18s\n' runner slots "wall median" "wall min" "ms/trial median" "ms/trial min"
for n in "${names[@]}"; do
    s=$SLOTS; [[ $n == serial ]] && s=1
    # shellcheck disable=SC2086
    read -r "med[$n]" "min[$n]" < <(printf '%s\n' ${walls[$n]} | sort -g | awk '
        {v[NR]=$1} END{m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; print m, v[1]}')
    ov_med=$(awk -v w="${med[$n]}" -v s="$s" -v t="$TRIALS" 'BEGIN{printf "%.2f", w*s/t*1000}')
    ov_min=$(awk -v w="${min[$n]}" -v s="$s" -v t="$TRIALS" 'BEGIN{printf "%.2f", w*s/t*1000}')
    printf '%-14s %5s %11.3fs %9.3fs %18s %18s\n' "$n" "$s" "${med[$n]}" "${min[$n]}" "$ov_med" "$ov_min"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
echo
echo "overhead ratio tunectl / parallel:      $(ratio "${med[tunectl]}" "${med[parallel]}") (median), $(ratio "${min[tunectl]}" "${min[parallel]}") (min)"
echo "overhead ratio tunectl / parallel-bare: $(ratio "${med[tunectl]}" "${med[parallel-bare]}") (median), $(ratio "${min[tunectl]}" "${min[parallel-bare]}") (min)"
echo "overhead ratio tunectl / parallel-true: $(ratio "${med[tunectl]}" "${med[parallel-true]}") (median), $(ratio "${min[tunectl]}" "${min[parallel-true]}") (min); target <= 0.5"
echo "overhead ratio tunectl / xargs-true:    $(ratio "${med[tunectl]}" "${med[xargs-true]}") (median), $(ratio "${min[tunectl]}" "${min[xargs-true]}") (min); target <= 1.5"
if awk -v a="${med[tunectl]}" -v b="${med[parallel]}" 'BEGIN{exit !(a <= b)}'; then
    echo "target (tunectl per-trial overhead <= GNU parallel's): met"
else
    echo "target (tunectl per-trial overhead <= GNU parallel's): NOT met"
fi
