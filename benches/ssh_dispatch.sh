#!/usr/bin/env bash
# The remote job strings are shell code run by the hosts' shells, on purpose:
# shellcheck disable=SC2016
# Dispatch over SSH: N no-op trials over H loopback sshd hosts x S slots,
# tunectl vs GNU parallel (--sshloginfile) without and with ControlMaster,
# all in the same run, on the same hosts.
#
#   benches/ssh_dispatch.sh                          # 400 trials, 4 hosts x 4 slots, 3 rounds
#   TRIALS=400 HOSTS=4 SLOTS=4 ROUNDS=5 benches/ssh_dispatch.sh
#   TUNECTL=/path/to/tunectl benches/ssh_dispatch.sh # skip the build
#   TUNECTL_EARLIER=/path/to/old/tunectl ...          # also time an earlier build
#   SKIP_PLAIN=1 ...                                 # leave out `parallel` without ControlMaster
#
# The hosts: one /usr/sbin/sshd per loopback address (127.0.0.2, .3, ...),
# started by benches/lib/sshd_fleet.sh: each with its own ed25519 host key
# made here, one client key, a known_hosts file, HOME set per host by the
# sshd config (so no shell start-up files run), MaxSessions 100. Needs openssh-server (installed with apt when missing and
# run as root) and GNU parallel (likewise).
#
# Every trial is the same no-op that honours the trial contract: it writes
# {"metrics":{"t":1}} to "$TUNECTL_RESULT".
#
# - tunectl: `tunectl launch` of a study with one int knob of TRIALS values
#   (grid, warmup 0, repeats 1, no anchors, no confirmation: exactly TRIALS
#   trials), on an inventory of the H hosts with `slots: S`; fresh ledger each
#   round (on $TMPDIR). Per attempt: a lease and an attempt record in the
#   ledger, one ssh session running the wrapper (fresh directory, the command
#   in its own process group, result and streams back, directory removed).
# - parallel: `parallel -j S --sshloginfile F` with one line per host, each
#   job running on the host: mkdir a fresh directory, cd, run the command with
#   sh -c and TUNECTL_RESULT set, cat the result, remove the directory. Every
#   job is a new ssh connection (key exchange, authentication).
# - parallel-cm: the same job over master connections opened before the
#   clock starts (one `ssh -fN -o ControlMaster=yes` per host), every job's
#   ssh with ControlMaster=no and the master's ControlPath, so that every job
#   is multiplexed (with ControlMaster=auto, jobs that start together race
#   for the socket and the losers print "ControlSocket ... already exists,
#   disabling multiplexing" and connect on their own: a handicapped peer).
#   A round fails if any job's ssh says it did not multiplex.
# - parallel-cm-bare: GNU parallel in its best form: the bare command (`true`)
#   over the same pre-opened masters, no directory, no result file.
#
# Wall time includes connecting on tunectl's side (its master connections
# and probes) and parallel's first connections for `parallel`, but not the
# masters of the -cm runs, which are opened before their clock starts.
# Rounds are interleaved (tunectl, parallel, parallel-cm, parallel-cm-bare,
# tunectl, ...); the table shows the median and the minimum.
set -euo pipefail

TRIALS=${TRIALS:-400}
HOSTS=${HOSTS:-4}
SLOTS=${SLOTS:-4}
ROUNDS=${ROUNDS:-3}
here=$(cd "$(dirname "$0")/.." && pwd)

if [[ -z "${TUNECTL:-}" ]]; then
    (cd "$here" && cargo build --release --bin tunectl --quiet)
    TUNECTL="${CARGO_TARGET_DIR:-$here/target}/release/tunectl"
fi
[[ -x "$TUNECTL" ]] || { echo "no tunectl binary at $TUNECTL" >&2; exit 1; }

need() { # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing $2 (apt-get)" >&2
        apt-get install -y -qq "$2" >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$2" >/dev/null 2>&1; }
    fi
    command -v "$1" >/dev/null 2>&1 || { echo "$1 ($2) is required" >&2; exit 1; }
}
need parallel parallel
[[ -x /usr/sbin/sshd ]] || need sshd openssh-server
need ssh openssh-client

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsd.XXXXXX")
# shellcheck source=benches/lib/sshd_fleet.sh
. "$here/benches/lib/sshd_fleet.sh"
cleanup() {
    sshd_fleet_stop
    for s in "$tmp"/cm/*; do [[ -S $s ]] && ssh -o ControlPath="$s" -O exit x 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/cm"
chmod 700 "$tmp/cm"

sshd_fleet_start "$tmp" "$HOSTS"
: >"$tmp/logins"
: >"$tmp/logins-cm"
: >"$tmp/ssh_config"
user=$(id -un)
for i in $(seq 1 "$HOSTS"); do
    addr=${SSHD_ADDR[i]}
    port=${SSHD_PORT[i]}
    cat >>"$tmp/ssh_config" <<EOF
Host h$i
  HostName $addr
  Port $port
  User $user
  IdentityFile $tmp/id
  IdentitiesOnly yes
  UserKnownHostsFile $tmp/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
EOF
    echo "$SLOTS/ssh -F $tmp/ssh_config h$i" >>"$tmp/logins"
    echo "$SLOTS/ssh -F $tmp/ssh_config -o ControlMaster=no -o ControlPath=$tmp/cm/%C h$i" >>"$tmp/logins-cm"
done
sshd_fleet_inventory "$tmp" "$SLOTS" >"$tmp/inventory.yaml"

CMD='printf '"'"'{"metrics":{"t":1}}'"'"' > "$TUNECTL_RESULT"'
cat >"$tmp/study.yaml" <<EOF
name: ssh-dispatch-bench
knobs:
  i: {kind: int, min: 0, max: $((TRIALS - 1)), default: 0}
trial:
  command: '$(printf '%s' "$CMD" | sed "s/'/''/g")'
objective: {metric: t, better: lower}
measurement: {warmup: 0, repeats: 1, anchor_every: 0, confirm_repeats: 0}
EOF

# One parallel job, on the host: what tunectl's wrapper does, minus ledger.
# JOB_BARE: the command alone.
JOB_BARE=true
JOB='d=$HOME/pjobs/{#}; mkdir -p "$d" && cd "$d" && TUNECTL_RESULT="$d/r.json" sh -c '"'"'printf "{\"metrics\":{\"t\":1}}" > "$TUNECTL_RESULT"'"'"' && cat r.json && cd / && rm -rf "$d"'

now() { date +%s%N; }
declare -A times cpu_own cpu_hosts
# CPU of the hosts' side: every sshd listener's own time plus that of its
# reaped descendants (per-connection sshd, sessions, shells, trials), in ms.
# A connection's share is counted once it has closed and been reaped.
tck=$(getconf CLK_TCK)
host_cpu() {
    local p t=0 f
    for p in "${SSHD_PIDS[@]}"; do
        read -r -a f <"/proc/$p/stat"
        # Fields 14-17 (utime stime cutime cstime); the comm field has no
        # space here.
        t=$((t + f[13] + f[14] + f[15] + f[16]))
    done
    echo $((t * 1000 / tck))
}
# `timed NAME CMD...`: run CMD under /usr/bin/time, add its user+sys CPU
# (its waited-for children included) to cpu_own[NAME], in ms. (time(1)
# puts a line before the figures when CMD exits non-zero: the last line.)
timed() {
    local name=$1
    shift
    /usr/bin/time -f '%U %S' -o "$tmp/time.$name" "$@"
    local rc=$?
    cpu_own[$name]+="$(awk '{u = $1; s = $2} END {printf "%d", (u + s) * 1000}' "$tmp/time.$name") "
    return $rc
}
run_tunectl() { # round [name binary]
    local r=$1 name=${2:-tunectl} bin=${3:-$TUNECTL} t0 t1
    t0=$(now)
    # Exit 3: the buckets are DRAFTs, as they must be with one sample a
    # trial (repeats 1); every trial ran, which is what is measured here.
    local rc=0 h0 h1
    h0=$(host_cpu)
    timed "$name" "$bin" launch "$tmp/study.yaml" --inventory "$tmp/inventory.yaml" \
        --ledger "$tmp/ledger-$name-$r" --progress quiet --yes >"$tmp/$name-$r.out" 2>&1 || rc=$?
    t1=$(now)
    sleep 0.5 # the hosts reap the closed connections
    h1=$(host_cpu)
    cpu_hosts[$name]+="$((h1 - h0)) "
    [[ $rc == 0 || $rc == 3 ]] || { cat "$tmp/$name-$r.out" >&2; exit 1; }
    grep -q "^ran $TRIALS trials ($TRIALS ok" "$tmp/$name-$r.out" ||
        { echo "$name did not run $TRIALS ok trials:" >&2; cat "$tmp/$name-$r.out" >&2; exit 1; }
    times[$name]+="$(( (t1 - t0) / 1000000 )) "
}
run_parallel() { # name loginfile job
    local name=$1 logins=$2 job=$3 t0 t1 n
    t0=$(now)
    timed "$name" parallel --sshloginfile "$logins" --halt now,fail=1 --joblog "$tmp/$name.joblog" \
        "$job" ::: $(seq "$TRIALS") >"$tmp/$name.out" 2>"$tmp/$name.err"
    t1=$(now)
    # Every job ran and exited 0 (the joblog's 7th column), and none of
    # them connected without the master when it was meant to multiplex.
    n=$(awk -F'\t' 'NR > 1 && $7 == 0' "$tmp/$name.joblog" | wc -l)
    [[ $n == "$TRIALS" ]] || { echo "$name: $n jobs ok, expected $TRIALS" >&2; exit 1; }
    if [[ $job == "$JOB" ]]; then
        n=$(grep -o metrics "$tmp/$name.out" | wc -l)
        [[ $n == "$TRIALS" ]] || { echo "$name: $n results, expected $TRIALS" >&2; exit 1; }
    fi
    if grep -qi "multiplexing\|ControlSocket\|mux_client" "$tmp/$name.err"; then
        echo "$name: a job did not multiplex:" >&2
        sort -u "$tmp/$name.err" | head -5 >&2
        exit 1
    fi
    times[$name]+="$(( (t1 - t0) / 1000000 )) "
}
close_masters() {
    for s in "$tmp"/cm/*; do [[ -S $s ]] && ssh -o ControlPath="$s" -O exit x 2>/dev/null; done
    return 0
}
open_masters() { # one master per host, checked, before the clock starts
    local i
    for i in $(seq "$HOSTS"); do
        ssh -F "$tmp/ssh_config" -o ControlMaster=yes -o ControlPersist=600 \
            -o ControlPath="$tmp/cm/%C" -fN "h$i"
        ssh -F "$tmp/ssh_config" -o ControlPath="$tmp/cm/%C" -O check "h$i" 2>/dev/null ||
            { echo "no master connection to h$i" >&2; exit 1; }
    done
}

echo "hosts up: $HOSTS x $SLOTS slots; $TRIALS trials; $ROUNDS rounds" >&2
for r in $(seq "$ROUNDS"); do
    echo "round $r" >&2
    run_tunectl "$r"
    [[ -z "${TUNECTL_EARLIER:-}" ]] || run_tunectl "$r" tunectl-earlier "$TUNECTL_EARLIER"
    [[ -n "${SKIP_PLAIN:-}" ]] || run_parallel parallel "$tmp/logins" "$JOB"
    # Fresh masters for each -cm run, opened outside its clock; the hosts'
    # CPU is read around them (their connections are reaped once closed).
    for name in parallel-cm parallel-cm-bare; do
        h0=$(host_cpu)
        open_masters
        if [[ $name == parallel-cm ]]; then job=$JOB; else job=$JOB_BARE; fi
        run_parallel "$name" "$tmp/logins-cm" "$job"
        close_masters
        sleep 0.5
        h1=$(host_cpu)
        cpu_hosts[$name]+="$((h1 - h0)) "
    done
done

stats() { # "ms ms ms" -> "median min"
    tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; print m, a[1]}'
}
read -r cm_med _ < <(stats "${times[parallel-cm-bare]}")
printf '| runner | wall median (s) | wall min (s) | per trial (ms of slot time) | vs parallel-cm-bare (median) | rounds (ms) |\n'
printf '|---|---|---|---|---|---|\n'
names="tunectl"
[[ -z "${TUNECTL_EARLIER:-}" ]] || names="$names tunectl-earlier"
[[ -n "${SKIP_PLAIN:-}" ]] || names="$names parallel"
for name in $names parallel-cm parallel-cm-bare; do
    read -r med min < <(stats "${times[$name]}")
    awk -v n="$name" -v med="$med" -v min="$min" -v cm="$cm_med" -v t="$TRIALS" -v s=$((HOSTS * SLOTS)) -v all="${times[$name]}" \
        'BEGIN { printf "| %s | %.2f | %.2f | %.1f | %.2fx | %s|\n", n, med/1000, min/1000, med*s/t, med/cm, all }'
done
# Where the CPU went (medians): the runner's own process tree on this side
# (for tunectl: the launcher, not its ssh masters, which run detached), and
# everything under the hosts' sshd (for `parallel`, whose jobs connect on
# their own, its connections are not counted there: left blank).
printf '\n| runner | own CPU (s) | hosts'"'"' CPU (s) | own + hosts per trial (ms) |\n'
printf '|---|---|---|---|\n'
for name in $names parallel-cm parallel-cm-bare; do
    read -r own _ < <(stats "${cpu_own[$name]}")
    hosts=
    [[ -n "${cpu_hosts[$name]:-}" ]] && read -r hosts _ < <(stats "${cpu_hosts[$name]}")
    awk -v n="$name" -v own="$own" -v h="$hosts" -v t="$TRIALS" \
        'BEGIN { if (h == "") printf "| %s | %.2f | | |\n", n, own/1000; else printf "| %s | %.2f | %.2f | %.1f |\n", n, own/1000, h/1000, (own+h)/t }'
done
