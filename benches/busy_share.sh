#!/usr/bin/env bash
# How busy a fleet's slots stay: an adaptive study (Hyperband, several
# iterations) of trials whose durations differ by config and budget, on 4
# loopback sshd hosts of two host classes (a FAKE nvidia-smi per host: two
# "H100" hosts and two "A100" hosts, the A100 trials 1.4x slower).
#
#   benches/busy_share.sh                 # 2 slots a host, 3 Hyperband iterations
#   SLOTS=4 ITERATIONS=5 CELLS=2 benches/busy_share.sh
#   KEEP=1 benches/busy_share.sh          # keep the ledger and files
#   TUNECTL=/path/to/tunectl benches/busy_share.sh   # skip the build
#   RACE=1 benches/busy_share.sh          # a grid study whose decisions are
#                                         # close: racing rounds, no Hyperband
#
# It reports, from the ledger's attempt records:
# - busy share: the attempts' wall time (`duration_s`, as the launcher saw
#   it: dispatch, the run and its result back) over slots x makespan, and
#   the same with the counted run alone (`run_s`: the trial's own time);
# - the makespan (the launch's wall time, probes and connections included,
#   and the trial phase: first attempt start to last attempt end) against
#   its lower bound: per class, max(class attempt time / class slots,
#   longest attempt), the largest over classes (classes run on their own
#   hosts at the same time).
# Target (docs/benchmarks.md): >= 97% of host-slot time busy.
set -euo pipefail

SLOTS=${SLOTS:-2}
ITERATIONS=${ITERATIONS:-3}
CELLS=${CELLS:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=benches/lib/sshd_fleet.sh
. "$here/benches/lib/sshd_fleet.sh"

if [[ -z "${TUNECTL:-}" ]]; then
    (cd "$here" && cargo build --release --bin tunectl --quiet)
    TUNECTL="${CARGO_TARGET_DIR:-$here/target}/release/tunectl"
fi
[[ -x "$TUNECTL" ]] || { echo "no tunectl binary at $TUNECTL" >&2; exit 1; }
[[ -x /usr/sbin/sshd ]] || { echo "openssh-server is required (/usr/sbin/sshd)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tbs.XXXXXX")
cleanup() { sshd_fleet_stop; [[ -n "${KEEP:-}" ]] && echo "kept $tmp" >&2 || rm -rf "$tmp"; }
trap cleanup EXIT
sshd_fleet_start "$tmp" 4

for i in 1 2 3 4; do
    if ((i <= 2)); then gpu="NVIDIA H100 80GB HBM3" factor=1.0; else gpu="NVIDIA A100-SXM4-80GB" factor=1.4; fi
    cat >"$tmp/h$i/bin/nvidia-smi" <<SMI
#!/bin/sh
# FAKE nvidia-smi of bench host h$i (benches/busy_share.sh): NOT NVIDIA's tool.
FAKE_GPU_NAME='$gpu' FAKE_GPU_COUNT=$SLOTS exec /bin/sh '$here/tests/fixtures/fake-nvidia-smi' "\$@"
SMI
    chmod +x "$tmp/h$i/bin/nvidia-smi"
    echo "$factor" >"$tmp/h$i/home/factor"
done
sshd_fleet_inventory "$tmp" "$SLOTS" >"$tmp/inventory.yaml"

# The FAKE trial: sleeps budget x cost(tile, split) x the host's factor,
# with 3% noise, and reports the time it slept. Costs run from 4 to 40 ms
# a budget unit, so trials take from 4 ms to 0.5 s.
cat >"$tmp/trial.sh" <<'TRIAL'
#!/bin/sh
# FAKE trial for benches/busy_share.sh (no GPU work): sleeps and reports.
set -eu
factor=$(cat "$HOME/factor" 2>/dev/null || echo 1)
awk -v tile="$1" -v sp="$2" -v b="$TUNECTL_BUDGET" -v f="$factor" -v seed="$$" 'BEGIN {
    srand(seed);
    l = log(tile / 64) / log(2);
    cost = 0.004 + 0.004 * l * l + 0.003 * sp;
    t = b * cost * f * (1 + 0.03 * (2 * rand() - 1));
    printf "%.6f\n", t
}' >t.txt
sleep "$(cat t.txt)"
printf '{"metrics":{"t":%s}}\n' "$(cat t.txt)" >"$TUNECTL_RESULT"
TRIAL

if [[ -n "${RACE:-}" ]]; then
    # RACE=1: configs within a few percent of each other, 5 % noise a run,
    # durations log-normal (sigma 0.5) around 60 ms: the buckets race.
    cat >"$tmp/trial.sh" <<'TRIAL'
#!/bin/sh
# FAKE trial for benches/busy_share.sh RACE=1 (no GPU work): sleeps and reports.
set -eu
factor=$(cat "$HOME/factor" 2>/dev/null || echo 1)
awk -v tile="$1" -v sp="$2" -v f="$factor" -v seed="$$" 'BEGIN {
    srand(seed);
    l = log(tile / 32) / log(2);
    speed = 1 + 0.035 * l - 0.006 * l * l + 0.01 * (sp == 2);
    u1 = rand(); u2 = rand(); if (u1 < 1e-9) u1 = 1e-9;
    z = sqrt(-2 * log(u1)) * cos(6.283185307 * u2);
    dur = 0.06 * f * exp(0.5 * z);
    t = f / speed * (1 + 0.05 * (2 * rand() - 1));
    printf "%.6f %.6f\n", dur, t
}' >t.txt
sleep "$(cut -d' ' -f1 t.txt)"
printf '{"metrics":{"t":%s}}\n' "$(cut -d' ' -f2 t.txt)" >"$TUNECTL_RESULT"
TRIAL
    name=busy-share-race tiles="32, 64, 128, 256" splits="1, 2" defaults="32 1"
    rest="measurement: {warmup: 0, repeats: 3, max_repeats: 12, anchor_every: 0}"
else
    name=busy-share-bench tiles="8, 16, 32, 64, 128, 256, 512" splits="1, 2, 4, 8" defaults="8 8"
    rest="measurement: {warmup: 0, repeats: 3}
fidelity: {unit: steps, min_budget: 1, max_budget: 9, eta: 3}
strategy: {kind: hyperband, seed: 1, finalists: 2, iterations: $ITERATIONS}"
fi
cat >"$tmp/study.yaml" <<EOF
name: $name
knobs:
  tile: {kind: int, values: [$tiles], default: ${defaults% *}}
  split: {kind: int, values: [$splits], default: ${defaults#* }}
cells:
  c: [$(seq -s, 1 "$CELLS")]
trial:
  command: "sh {{ study_dir }}/trial.sh {{ tile }} {{ split }}"
  files: [trial.sh]
objective: {metric: t, unit: s, better: lower}
$rest
EOF

t0=$(date +%s%N)
rc=0
"$TUNECTL" launch "$tmp/study.yaml" --inventory "$tmp/inventory.yaml" \
    --ledger "$tmp/ledger" --progress plain --yes >"$tmp/launch.out" 2>&1 || rc=$?
t1=$(date +%s%N)
[[ $rc == 0 || $rc == 3 ]] || { cat "$tmp/launch.out" >&2; exit 1; }
grep -E ' · .*\[(VERDICT|DRAFT)\]|^ran [0-9]+ trials' "$tmp/launch.out" || tail -n 3 "$tmp/launch.out"
echo "racing rounds: $(grep -c 'racing in bucket' "$tmp/launch.out" || true)," \
    "queued while runs were out: $(grep -c 'queued while' "$tmp/launch.out" || true)"

python3 - "$tmp/ledger" "$(( (t1 - t0) / 1000000 ))" "$SLOTS" <<'PY'
import json, os, sys
from datetime import datetime

ledger, wall_ms, slots = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
attempts = []
for root, _, files in os.walk(ledger):
    if os.sep + "trials" + os.sep not in root + os.sep:
        continue
    for f in files:
        if f.endswith(".json"):
            with open(os.path.join(root, f)) as fh:
                attempts.append(json.load(fh))
if not attempts:
    sys.exit("no attempts in the ledger")
ts = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
hosts = {a["host"] for a in attempts}
total_slots = slots * len(hosts)
wall = wall_ms / 1000
phase = max(ts(a["finished_at"]) for a in attempts) - min(ts(a["started_at"]) for a in attempts)
dur = sum(a["duration_s"] for a in attempts)
run = sum(a.get("run_s") or 0 for a in attempts)
bound = 0.0
for c in {a["host_class"] for a in attempts}:
    mine = [a for a in attempts if a["host_class"] == c]
    c_slots = slots * len({a["host"] for a in mine})
    bound = max(bound, sum(a["duration_s"] for a in mine) / c_slots,
                max(a["duration_s"] for a in mine))
print(f"attempts: {len(attempts)} on {len(hosts)} hosts x {slots} slots; "
      f"longest {max(a['duration_s'] for a in attempts):.3f} s, shortest {min(a['duration_s'] for a in attempts):.3f} s")
print("| makespan | s | busy share (attempt wall) | busy share (trial's own run) | lower bound, s | makespan / bound |")
print("|---|---|---|---|---|---|")
for name, m in [("launch (probes included)", wall), ("trial phase", phase)]:
    print(f"| fleet, {name} | {m:.2f} | {100 * dur / (total_slots * m):.1f} % | "
          f"{100 * run / (total_slots * m):.1f} % | {bound:.2f} | {m / bound:.3f} |")
# A class runs only its own trials: once it is done its hosts idle while
# a slower class finishes. Per class, over its own span:
for c in sorted({a["host_class"] for a in attempts}):
    mine = [a for a in attempts if a["host_class"] == c]
    c_slots = slots * len({a["host"] for a in mine})
    span = max(ts(a["finished_at"]) for a in mine) - min(ts(a["started_at"]) for a in mine)
    c_dur = sum(a["duration_s"] for a in mine)
    c_run = sum(a.get("run_s") or 0 for a in mine)
    c_bound = max(c_dur / c_slots, max(a["duration_s"] for a in mine))
    print(f"| class {c} ({len(mine)} attempts), its span | {span:.2f} | {100 * c_dur / (c_slots * span):.1f} % | "
          f"{100 * c_run / (c_slots * span):.1f} % | {c_bound:.2f} | {span / c_bound:.3f} |")
over = sorted(a["duration_s"] - (a.get("run_s") or 0) for a in attempts)
print(f"dispatch overhead per attempt (attempt wall - run): median {1000 * over[len(over) // 2]:.0f} ms")
PY
