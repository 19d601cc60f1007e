#!/usr/bin/env bash
# Ledger at scale: read times of a 100,000-attempt study, tunectl against
# Optuna holding the same 100,000 trials.
#
#   benches/ledger_scale.sh                       # ROUNDS=3
#   ROUNDS=5 benches/ledger_scale.sh
#   TUNECTL=/path/to/tunectl benches/ledger_scale.sh   # skip the build
#   OPTUNA_STORAGES=journal benches/ledger_scale.sh    # skip SQLite (its load takes ~30 min)
#   OPTUNA_STORAGES= benches/ledger_scale.sh           # tunectl only
#   DROP_CACHES=1 benches/ledger_scale.sh         # root: also one round with the page cache dropped
#   KEEP=1 benches/ledger_scale.sh                # keep the work directory (path on stderr)
#   REUSE=DIR benches/ledger_scale.sh             # reuse what a KEEP=1 run left in DIR
#   BEFORE=/path/to/old/tunectl benches/ledger_scale.sh   # also time another build, interleaved
#   SCALE=10 benches/ledger_scale.sh              # 10x the cells: 1,000,000 attempts
#
# What it does (details in docs/benchmarks.md):
#
# 1. Writes a study (6 knobs, 4,800 configs after its constraint, 6 cells,
#    3 repeats and no racing (max_repeats 3), anchors every 4 candidates,
#    confirmation rounds) whose
#    command does not exist, and launches it once for real with
#    `budget: {max_trials: 1}` (not part of the spec hash): tunectl writes
#    study.json, the host record and 12 failed baselines (each cell's first
#    run and its re-run; the launch then stops on the failing baseline).
# 2. benches/ledger_scale.py checks its own records against those 6 (trial
#    keys, labels, commands, byte-for-byte JSON), replaces them with every
#    sweep trial of the study and the anchors, reads `tunectl report` for the
#    bucket winners, adds their confirmation rounds, and pads with lost
#    attempts (re-run afterwards) to exactly 100,000 attempt objects.
# 3. Checks the result: `tunectl ledger check` reads 100,000 attempts, 0
#    unreadable; `tunectl launch` of the study runs 0 trials.
# 4. Loads the same 100,000 trials into Optuna (create_trial + add_trials),
#    SQLite and JournalStorage; the load time is reported on its own.
# 5. ROUNDS rounds, interleaved, each command under /usr/bin/time -v (wall
#    time, CPU time and peak RSS):
#    tunectl report --format json / status / ledger check / launch (resume),
#    each without the compacted index (removed first: the run lists and
#    reads every object and writes the index) and with it (`ledger check`
#    always lists and reads everything); Optuna `study.trials`,
#    `study.get_trials(deepcopy=False)` and `study.trials_dataframe()`, each
#    in a fresh process.
#
#    With BEFORE=/path/to/tunectl, the same rounds also time that binary's
#    report, status and resume launch, each without and with its own index,
#    on the same ledger (a build from before the arrival log and the
#    compact index keeps its own index, <study>/index/attempts.json).
#
# Targets (from the issues): tunectl's indexed report, status and resume
# launch each at most 0.2 s and at least 50x faster than Optuna's fastest
# read of the same trials (in-process time, whichever call and storage is
# fastest: JournalStorage's get_trials(deepcopy=False) so far); the first
# read without an index at most 1.5 s; peak RSS at most 128 MiB. The
# verdicts printed at the end say which are met ("no index" is the first
# read after the index is lost; the index is kept by every scan); and
# pandas' read_parquet and a DuckDB query over `tunectl export --format
# parquet` of the study (attempts, and --samples) at most 1 s in-process
# (the Python side in the notebook example's environment,
# examples/notebook/setup.sh).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
# SCALE > 1 adds a cell axis `shard` of SCALE values (one bucket): SCALE
# times the trials, and TOTAL attempts.
SCALE=${SCALE:-1}
[[ $SCALE =~ ^[1-9][0-9]*$ ]] || { echo "SCALE must be a positive integer" >&2; exit 1; }
TOTAL=$((100000 * SCALE))
OPTUNA_STORAGES=${OPTUNA_STORAGES-"sqlite journal"}
here=$(cd "$(dirname "$0")/.." && pwd)
helper="$here/benches/ledger_scale.py"

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

# Optuna in its own virtual environment, kept between runs.
OPTUNA_VENV=${OPTUNA_VENV:-${TMPDIR:-/tmp}/tunectl-bench-optuna-venv}
if [[ -n "$OPTUNA_STORAGES" ]] && ! "$OPTUNA_VENV/bin/python" -c 'import optuna, pandas' 2>/dev/null; then
    echo "installing optuna and pandas into $OPTUNA_VENV" >&2
    python3 -m venv "$OPTUNA_VENV"
    "$OPTUNA_VENV/bin/pip" install -q optuna pandas >&2
fi
py=$OPTUNA_VENV/bin/python

if [[ -n "${REUSE:-}" ]]; then
    tmp=$REUSE
    mkdir -p "$tmp"
else
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tunectl-ledger-scale.XXXXXX")
fi
if [[ -z "${KEEP:-}${REUSE:-}" ]]; then
    trap 'rm -rf "$tmp"' EXIT
else
    echo "work directory: $tmp (kept)" >&2
fi
L=$tmp/ledger
S=ledger-scale
index=$L/$S/index/compact.json

# ---------------------------------------------------------------- the study
cat > "$tmp/study.yaml" <<'EOF'
name: ledger-scale
description: >
  Synthetic study of benches/ledger_scale.sh: its attempts are generated in
  the ledger; bin/kernel-bench does not exist and never runs.
context:
  workload: blocked reduction kernel (synthetic)
  elements: batch x seq x 2048
knobs:
  threads:  {kind: int, values: [1, 2, 4, 8, 16, 32, 64], default: 1}
  block:    {kind: int, min: 64, max: 8192, scale: pow2, default: 1024}
  unroll:   {kind: int, values: [1, 2, 4, 8], default: 1}
  accum:    {kind: categorical, values: [f64, i64, f32, i32], default: f64}
  prefetch: {kind: bool, default: false}
  schedule: {kind: categorical, values: [static, dynamic, guided], default: static}
constraints:
  - "not (accum == 'i32' and threads >= 16)"
cells:
  batch: [1, 4, 16]
  seq: [512, 4096]
trial:
  command: "{{ study_dir }}/bin/kernel-bench --threads {{ threads }} --block {{ block }} --unroll {{ unroll }} --accum {{ accum }} --prefetch {{ prefetch }} --schedule {{ schedule }} --batch {{ batch }} --seq {{ seq }} --out out.txt"
  timeout: 60s
objective: {metric: throughput, unit: Melem/s, better: higher}
metrics:
  - {name: time_ms, unit: ms, better: lower}
measurement: {warmup: 1, repeats: 3, anchor_every: 4, confirm_repeats: 3, max_repeats: 3}
gate:
  outputs: [out.txt]
  patterns:
    compile_failure: ['kernel-bench: error: .*']
buckets: {batch: pow2, seq: all}
strategy: {kind: grid}
EOF
if ((SCALE > 1)); then
    shards=$(seq -s ', ' 1 "$SCALE")
    sed -i -e "s/^  seq: \[512, 4096\]$/&\n  shard: [$shards]/" \
        -e "s/^buckets: {batch: pow2, seq: all}$/buckets: {batch: pow2, seq: all, shard: all}/" "$tmp/study.yaml"
    grep -q '^  shard: ' "$tmp/study.yaml" && grep -q 'shard: all}$' "$tmp/study.yaml" ||
        { echo "could not add the shard axis to the study" >&2; exit 1; }
fi
# Same spec (budget is not part of the spec hash): plans the baselines only.
{ cat "$tmp/study.yaml"; echo "budget: {max_trials: 1}"; } > "$tmp/probe.yaml"
printf 'hosts:\n  - {name: local, transport: local, slots: 4}\n' > "$tmp/inventory.yaml"

launch() { # $1 = study file
    "$TUNECTL" launch "$1" --inventory "$tmp/inventory.yaml" --ledger "$L" \
        --workdir "$tmp/work" --progress quiet
}

# ------------------------------------------------------------ the ledger
if [[ ! -e "$tmp/.generated" ]]; then
    rm -rf "$L" "$tmp/work"
    echo "probe launch (writes study.json, the host record, and each cell's failed baseline: its run and re-run)" >&2
    # The baseline's command does not exist: its first run and its re-run
    # fail, and the launch ends on that error of the study, as it should.
    if launch "$tmp/probe.yaml" > /dev/null 2> "$tmp/probe.err" ||
        ! grep -q "the baseline fails reproducibly" "$tmp/probe.err"; then
        cat "$tmp/probe.err" >&2
        echo "the probe launch did not end on its failing baseline" >&2
        exit 1
    fi
    echo "generating sweep trials and anchors" >&2
    t0=$EPOCHREALTIME
    python3 "$helper" sweep "$L" "$S" > "$tmp/gen-sweep.json"
    "$TUNECTL" report "$S" --ledger "$L" --format json > "$tmp/winners.json"
    rm -rf "$L/$S/index"
    python3 "$helper" confirm "$L" "$S" "$tmp/winners.json" --total "$TOTAL" > "$tmp/gen-confirm.json"
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f\n", b - a}' > "$tmp/gen-seconds"
    cat "$tmp/gen-sweep.json" "$tmp/gen-confirm.json" >&2
    echo "checking: ledger check, then a launch that must run nothing" >&2
    "$TUNECTL" ledger check "$S" --ledger "$L" > "$tmp/check.out"
    grep -q "^$S: $TOTAL attempts readable, 0 voided, 0 unreadable\(, 0 missing\)\?$" "$tmp/check.out" ||
        { cat "$tmp/check.out" >&2; echo "ledger check did not read $TOTAL attempts" >&2; exit 1; }
    rm -rf "$L/$S/index"
    launch "$tmp/study.yaml" > /dev/null 2> "$tmp/resume.err"
    grep -q "^ran 0 trials (0 ok, 0 failed), 0 lost, " "$tmp/resume.err" ||
        { cat "$tmp/resume.err" >&2; echo "the resume launch ran trials" >&2; exit 1; }
    tail -n 1 "$tmp/resume.err" >&2
    rm -rf "$L/$S/index"
    touch "$tmp/.generated"
fi

optuna_file() { # $1 = sqlite | journal
    case $1 in
        sqlite) echo "$tmp/optuna.db" ;;
        *) echo "$tmp/optuna.journal" ;;
    esac
}
optuna_url() { # $1 = sqlite | journal
    case $1 in
        sqlite) echo "sqlite:///$(optuna_file sqlite)" ;;
        journal) echo "journal:$(optuna_file journal)" ;;
        *) echo "unknown storage $1 (sqlite, journal)" >&2; exit 1 ;;
    esac
}
for st in $OPTUNA_STORAGES; do
    [[ -e "$tmp/optuna-$st.load.json" ]] && continue
    rm -f "$(optuna_file "$st")"
    echo "loading $TOTAL trials into Optuna ($st)$([[ $st == sqlite ]] && echo '; about 30 min')" >&2
    /usr/bin/time -v -o "$tmp/optuna-$st.load.time" \
        "$py" "$helper" optuna-load "$L" "$S" "$(optuna_url "$st")" > "$tmp/optuna-$st.load.part"
    mv "$tmp/optuna-$st.load.part" "$tmp/optuna-$st.load.json"
    cat "$tmp/optuna-$st.load.json" >&2
done

# ------------------------------------------------------------ measuring
declare -A walls rss ops cpus
run() { # $1 = row name, $2 = check, rest = command
    local name=$1 check=$2 t0 t1 w m
    shift 2
    t0=$EPOCHREALTIME
    /usr/bin/time -v -o "$tmp/time.txt" "$@" > "$tmp/out" 2> "$tmp/err" ||
        { cat "$tmp/err" >&2; echo "$name failed: $*" >&2; exit 1; }
    t1=$EPOCHREALTIME
    case $check in
        report) python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert len(r["classes"][0]["buckets"]) == 3' "$tmp/out" ;;
        status) grep -q "done .* pending" "$tmp/out" ;;
        check) grep -q "^$S: $TOTAL attempts readable" "$tmp/out" ;;
        launch) grep -q "^ran 0 trials (0 ok, 0 failed), 0 lost, " "$tmp/err" ;;
        export) [[ -s "$(cat "$tmp/out")" ]] ;;
        frame) python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["n"] > 0, r' "$tmp/out" &&
               ops[$name]+="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["op_s"])' "$tmp/out") " ;;
        optuna) python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["n"] == int(sys.argv[2]), r' "$tmp/out" "$TOTAL" &&
                ops[$name]+="$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["load_study_s"] + r["op_s"])' "$tmp/out") " ;;
    esac || { echo "$name: unexpected output" >&2; head -c 2000 "$tmp/out" "$tmp/err" >&2; exit 1; }
    w=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}')
    m=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time.txt")
    # CPU time (user + system) too: on a shared machine it moves less
    # than the wall time with the load.
    c=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.3f", s}' "$tmp/time.txt")
    walls[$name]+="$w "
    rss[$name]+="$m "
    cpus[$name]+="$c "
    printf '  %-44s %8.3f s %8.3f s cpu %9d KB\n' "$name" "$w" "$c" "$m" >&2
}
cold() { rm -rf "$L/$S/index"; }
optuna_ops=(trials get_trials dataframe)
op_name() {
    case $1 in
        trials) echo "study.trials" ;;
        get_trials) echo "get_trials(deepcopy=False)" ;;
        dataframe) echo "trials_dataframe()" ;;
    esac
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

report=("$TUNECTL" report "$S" --ledger "$L" --format json)
status=("$TUNECTL" status "$tmp/study.yaml" --ledger "$L")
check=("$TUNECTL" ledger check "$S" --ledger "$L")
resume=("$TUNECTL" launch "$tmp/study.yaml" --inventory "$tmp/inventory.yaml" --ledger "$L"
    --workdir "$tmp/work" --progress quiet)
# The study as data, and a notebook's first read of it (pandas, DuckDB: the
# notebook example's pinned environment).
export_a=("$TUNECTL" export "$S" --ledger "$L" --format parquet -o "$tmp/attempts.parquet")
export_s=("$TUNECTL" export "$S" --ledger "$L" --format parquet --samples -o "$tmp/samples.parquet")
nb_py=$("$here/examples/notebook/setup.sh")
if [[ -n "${BEFORE:-}" ]]; then
    [[ -x "$BEFORE" ]] || { echo "BEFORE=$BEFORE is not an executable" >&2; exit 1; }
    b_report=("$BEFORE" report "$S" --ledger "$L" --format json)
    b_status=("$BEFORE" status "$tmp/study.yaml" --ledger "$L")
    b_resume=("$BEFORE" launch "$tmp/study.yaml" --inventory "$tmp/inventory.yaml" --ledger "$L"
        --workdir "$tmp/work" --progress quiet)
fi

echo "ledger_scale: $TOTAL attempts, $ROUNDS rounds, $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
    echo "round $r" >&2
    cold; run "report, no index" report "${report[@]}"
    [[ -s "$index" ]] || { echo "the first report wrote no index" >&2; exit 1; }
    index_bytes=$(stat -c %s "$index")
    run "report, indexed" report "${report[@]}"
    run "status, indexed" status "${status[@]}"
    run "ledger check, indexed" check "${check[@]}"
    run "launch (resume), indexed" launch "${resume[@]}"
    cold; run "status, no index" status "${status[@]}"
    cold; run "ledger check, no index" check "${check[@]}"
    cold; run "launch (resume), no index" launch "${resume[@]}"
    run "export parquet, indexed" export "${export_a[@]}"
    run "export parquet --samples, indexed" export "${export_s[@]}"
    run "pandas read_parquet: attempts" frame "$nb_py" "$helper" parquet-read pandas "$tmp/attempts.parquet"
    run "pandas read_parquet: samples" frame "$nb_py" "$helper" parquet-read pandas "$tmp/samples.parquet"
    run "duckdb: attempts by status" frame "$nb_py" "$helper" parquet-read duckdb "$tmp/attempts.parquet"
    run "duckdb: samples, median per config" frame "$nb_py" "$helper" parquet-read duckdb "$tmp/samples.parquet"
    if [[ -n "${BEFORE:-}" ]]; then
        cold; run "before: report, no index" report "${b_report[@]}"
        run "before: report, indexed" report "${b_report[@]}"
        run "before: status, indexed" status "${b_status[@]}"
        run "before: launch (resume), indexed" launch "${b_resume[@]}"
        cold; run "before: status, no index" status "${b_status[@]}"
        cold; run "before: launch (resume), no index" launch "${b_resume[@]}"
        cold
    fi
    for st in $OPTUNA_STORAGES; do
        for op in "${optuna_ops[@]}"; do
            run "optuna $st: $(op_name "$op")" optuna "$py" "$helper" optuna-read "$(optuna_url "$st")" "$S" "$op"
        done
    done
done
if [[ -n "${DROP_CACHES:-}" ]]; then
    echo "page cache dropped before each command" >&2
    cold; drop_caches; run "report, no index, cache dropped" report "${report[@]}"
    drop_caches; run "report, indexed, cache dropped" report "${report[@]}"
    for st in $OPTUNA_STORAGES; do
        drop_caches; run "optuna $st: study.trials, cache dropped" optuna "$py" "$helper" optuna-read "$(optuna_url "$st")" "$S" trials
    done
fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------ the tables
# $1 is a list of numbers, split on purpose.
# shellcheck disable=SC2086
med() { printf '%s\n' $1 | sort -g | awk '{v[NR]=$1} END{print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
# shellcheck disable=SC2086
lo() { printf '%s\n' $1 | sort -g | head -n 1; }
# shellcheck disable=SC2086
hi() { printf '%s\n' $1 | sort -g | tail -n 1; }
declare -A median
rows=("report, no index" "report, indexed" "status, no index" "status, indexed"
    "ledger check, no index" "ledger check, indexed"
    "launch (resume), no index" "launch (resume), indexed"
    "export parquet, indexed" "export parquet --samples, indexed"
    "pandas read_parquet: attempts" "pandas read_parquet: samples"
    "duckdb: attempts by status" "duckdb: samples, median per config"
    "before: report, no index" "before: report, indexed" "before: status, no index"
    "before: status, indexed" "before: launch (resume), no index" "before: launch (resume), indexed")
for st in $OPTUNA_STORAGES; do
    for op in "${optuna_ops[@]}"; do rows+=("optuna $st: $(op_name "$op")"); done
done
if [[ -n "${DROP_CACHES:-}" ]]; then
    rows+=("report, no index, cache dropped" "report, indexed, cache dropped")
    for st in $OPTUNA_STORAGES; do rows+=("optuna $st: study.trials, cache dropped"); done
fi

json_bytes=$(find "$L/$S/trials" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
du_disk=$(du -s -B1 "$L/$S/trials" | cut -f1)
optuna_version=$("$py" -c 'import optuna; print(optuna.__version__)' 2>/dev/null || echo none)
sqlalchemy_version=$("$py" -c 'import sqlalchemy; print(sqlalchemy.__version__)' 2>/dev/null || echo none)
sqlite_version=$("$py" -c 'import sqlite3; print(sqlite3.sqlite_version)' 2>/dev/null || echo none)

echo
echo "tunectl $("$TUNECTL" --version | awk '{print $2}') ($TUNECTL; checkout at $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'))," \
    "optuna $optuna_version, SQLAlchemy $sqlalchemy_version, SQLite $sqlite_version, $([[ -x $py ]] && "$py" --version 2>&1 || echo 'no Optuna environment')"
[[ -n "${BEFORE:-}" ]] && echo "before: $BEFORE ($("$BEFORE" --version))"
echo "$(nproc) cpus ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM," \
    "$(uname -sr), work dir on $(findmnt -n -o FSTYPE --target "$tmp" 2>/dev/null || stat -f -c %T "$tmp"), load average $load_start at start, $load_end at end"
echo "ledger: $TOTAL attempt objects in $(find "$L/$S/trials" -mindepth 1 -maxdepth 1 -type d | wc -l) trial directories," \
    "$(find "$L/$S/log" -type f | wc -l) log entries in $(find "$L/$S/log" -mindepth 1 -maxdepth 1 -type d | wc -l) streams," \
    "$((json_bytes / 1048576)) MiB of JSON ($((du_disk / 1048576)) MiB on disk with the directories);" \
    "log $(( $(du -s -B1 "$L/$S/log" | cut -f1) / 1048576 )) MiB on disk; index ${index_bytes:-?} bytes;" \
    "generated in $(cat "$tmp/gen-seconds") s"
for st in $OPTUNA_STORAGES; do
    f=$(optuna_file "$st")
    python3 - "$tmp/optuna-$st.load.json" "$st" "$(stat -c %s "$f")" \
        "$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/optuna-$st.load.time")" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("optuna %s: add_trials of %d trials %.1f s (create_trial %.1f s, reading the ledger %.1f s, "
      "peak RSS %.0f MiB), file %.0f MiB" % (sys.argv[2], r["n"], r["add_trials_s"], r["create_trial_s"],
      r["read_ledger_s"], int(sys.argv[4]) / 1024, int(sys.argv[3]) / 1048576))
EOF
done
echo
echo "wall = whole process (median of $ROUNDS, min-max); cpu = user + system time (median);" \
    "optuna op = load_study + the call, in-process (median); RSS = max of /usr/bin/time -v"
printf '%-46s %9s %17s %8s %10s %9s\n' command "wall s" "min-max" "cpu s" "op s" "RSS MiB"
for name in "${rows[@]}"; do
    [[ -n "${walls[$name]:-}" ]] || continue
    median[$name]=$(med "${walls[$name]}")
    op=-
    [[ -n "${ops[$name]:-}" ]] && op=$(printf '%.3f' "$(med "${ops[$name]}")")
    printf '%-46s %9.3f %8.3f-%-8.3f %8.3f %10s %9.1f\n' "$name" "${median[$name]}" "$(lo "${walls[$name]}")" \
        "$(hi "${walls[$name]}")" "$(med "${cpus[$name]}")" "$op" "$(awk -v k="$(hi "${rss[$name]}")" 'BEGIN{print k/1024}')"
done

if [[ -n "$OPTUNA_STORAGES" ]]; then
    echo
    echo "speed-up = Optuna / tunectl (medians). 'wall': whole processes. 'op': Optuna's in-process time"
    echo "(load_study + the call, without starting Python and importing optuna), the comparison least"
    echo "favourable to tunectl. 'cpu': user + system time of the whole processes (steadier than wall"
    echo "time on a loaded machine)."
    tcols=("report, no index" "report, indexed" "status, no index" "status, indexed"
        "launch (resume), no index" "launch (resume), indexed")
    printf '%-52s' "optuna \\ tunectl"
    for t in "${tcols[@]}"; do printf '%26s' "$t"; done
    echo
    declare -A worst
    for st in $OPTUNA_STORAGES; do
        for op in "${optuna_ops[@]}"; do
            o="optuna $st: $(op_name "$op")"
            for kind in wall op cpu; do
                printf '%-52s' "$o $kind"
                ov=${median[$o]}
                [[ $kind == op ]] && ov=$(med "${ops[$o]}")
                [[ $kind == cpu ]] && ov=$(med "${cpus[$o]}")
                for t in "${tcols[@]}"; do
                    tv=${median[$t]}
                    [[ $kind == cpu ]] && tv=$(med "${cpus[$t]}")
                    x=$(awk -v o="$ov" -v t="$tv" 'BEGIN{printf "%.1f", o / t}')
                    printf '%25sx' "$x"
                    if [[ $kind == op ]] &&
                        { [[ -z "${worst[$t]:-}" ]] || awk -v b="$x" -v w="${worst[$t]}" 'BEGIN{exit !(b < w)}'; }; then
                        worst[$t]=$x
                    fi
                done
                echo
            done
        done
    done
    echo
    echo "target: indexed report, status and resume launch at least 50x faster than Optuna's fastest read"
    echo "(the smallest ratio over every Optuna call and storage, Optuna in-process):"
    for t in "report, indexed" "status, indexed" "launch (resume), indexed"; do
        printf '  %-28s %s (%sx)\n' "$t" "$(awk -v w="${worst[$t]}" 'BEGIN{print (w >= 50) ? "met" : "NOT met"}')" "${worst[$t]}"
    done
fi
echo
echo "targets: indexed <= 0.2 s, first read (no index) <= 1.5 s, peak RSS <= 128 MiB (medians; RSS the largest):"
for t in "report" "status" "launch (resume)"; do
    for kind in indexed "no index"; do
        name="$t, $kind"
        [[ -n "${median[$name]:-}" ]] || continue
        limit=0.2
        [[ $kind == "no index" ]] && limit=1.5
        m=$(awk -v k="$(hi "${rss[$name]}")" 'BEGIN{printf "%.1f", k/1024}')
        printf '  %-28s %8.3f s %s   %7s MiB %s\n' "$name" "${median[$name]}" \
            "$(awk -v w="${median[$name]}" -v l="$limit" 'BEGIN{print (w <= l) ? "met" : "NOT met"}')" "$m" \
            "$(awk -v m="$m" 'BEGIN{print (m <= 128) ? "met" : "NOT met"}')"
    done
done
echo
echo "target: pandas read_parquet and DuckDB over the exported study <= 1 s (in-process, median):"
for t in "pandas read_parquet: attempts" "pandas read_parquet: samples" \
    "duckdb: attempts by status" "duckdb: samples, median per config"; do
    [[ -n "${ops[$t]:-}" ]] || continue
    o=$(med "${ops[$t]}")
    printf '  %-36s %8.3f s %s\n' "$t" "$o" "$(awk -v w="$o" 'BEGIN{print (w <= 1) ? "met" : "NOT met"}')"
done
if [[ -n "${BEFORE:-}" ]]; then
    echo
    echo "speed-up over BEFORE (medians of the whole process):"
    for t in "report, no index" "report, indexed" "status, no index" "status, indexed" \
        "launch (resume), no index" "launch (resume), indexed"; do
        [[ -n "${median["before: $t"]:-}" && -n "${median[$t]:-}" ]] || continue
        printf '  %-28s %8.3f s -> %8.3f s  %6.1fx\n' "$t" "${median["before: $t"]}" "${median[$t]}" \
            "$(awk -v b="${median["before: $t"]}" -v a="${median[$t]}" 'BEGIN{print b / a}')"
    done
fi
