# shellcheck shell=bash
# Loopback sshd hosts for the benchmarks (sourced, not run).
#
#   sshd_fleet_start DIR N
#
# starts N /usr/sbin/sshd, host i (1..N) on 127.0.0.<i+1> at a free port,
# each with its own ed25519 host key made here, and writes under DIR:
#   id, id.pub      one client key (no passphrase) every host accepts
#   known_hosts     [addr]:port and key of every host
#   h<i>/bin        first on the host's PATH (put fakes such as a FAKE
#                   nvidia-smi there), h<i>/home its HOME (no shell start-up
#                   files run), h<i>/log sshd's log
# and sets SSHD_ADDR[i], SSHD_PORT[i] and SSHD_PIDS (kill them when done:
# sshd_fleet_stop). MaxSessions and MaxStartups are 100. Needs
# openssh-server and openssh-client; run as root for `/run/sshd`.

SSHD_ADDR=()
SSHD_PORT=()
SSHD_PIDS=()

sshd_fleet_start() { # DIR N
    local dir=$1 n=$2 i addr h port
    mkdir -p /run/sshd
    ssh-keygen -q -t ed25519 -N '' -C tunectl-bench-client -f "$dir/id"
    : >"$dir/known_hosts"
    for i in $(seq 1 "$n"); do
        addr="127.0.0.$((i + 1))"
        h="$dir/h$i"
        mkdir -p "$h/home" "$h/bin"
        ssh-keygen -q -t ed25519 -N '' -C "tunectl-bench-host$i" -f "$h/key"
        port=$(python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$addr")
        cat >"$h/sshd_config" <<CONF
ListenAddress $addr
HostKey $h/key
PidFile none
AuthorizedKeysFile $dir/id.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 100
MaxStartups 100
SetEnv PATH=$h/bin:/usr/local/bin:/usr/bin:/bin HOME=$h/home
CONF
        /usr/sbin/sshd -D -e -f "$h/sshd_config" -p "$port" 2>"$h/log" &
        SSHD_PIDS+=($!)
        for _ in $(seq 100); do
            (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null && break
            sleep 0.05
        done
        echo "[$addr]:$port $(cut -d' ' -f1,2 "$h/key.pub")" >>"$dir/known_hosts"
        SSHD_ADDR[i]=$addr
        SSHD_PORT[i]=$port
    done
}

# sshd_fleet_inventory DIR SLOTS > FILE: an inventory with one ssh entry
# per host started (named h1, h2, ...), each with SLOTS slots and
# max_sessions SLOTS + 2 (one spare for probes and kills).
sshd_fleet_inventory() { # DIR SLOTS
    local dir=$1 slots=$2 i user
    user=$(id -un)
    echo "hosts:"
    for i in "${!SSHD_ADDR[@]}"; do
        cat <<ENTRY
  - name: h$i
    transport: ssh
    host: ${SSHD_ADDR[i]}
    port: ${SSHD_PORT[i]}
    user: $user
    identity_file: $dir/id
    known_hosts_file: $dir/known_hosts
    slots: $slots
    max_sessions: $((slots + 2))
ENTRY
    done
}

sshd_fleet_stop() {
    local p
    for p in "${SSHD_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    return 0
}
