#!/bin/sh
# Slurm and MUNGE for the Slurm transport tests: tests/it/support/slurm.rs starts
# real single-node Slurm clusters (one slurmctld and one slurmd per node name,
# each cluster with its own slurm.conf, ports and state directories, started
# and stopped by the tests themselves). All of them authenticate through the
# one system munged, which this script provides.
#
#   . scripts/slurm.sh       (sourced by scripts/test.sh, from the repository root)
#   slurm_install            install slurm-wlm and munge with apt-get when
#                            slurmctld, slurmd, sbatch or munged is missing
#                            (root only; fails with a message otherwise),
#                            make sure /etc/munge/munge.key exists (munge:munge,
#                            0400) and start munged unless one is running;
#                            checks `munge -n | unmunge` at the end
#
# No slurmctld or slurmd is started here: apt does not start services in a
# container, and the tests start their own daemons with their own configs.
# munged is left running when the tests end (like a system service).

SLURM_MUNGE_KEY=/etc/munge/munge.key
SLURM_MUNGE_RUN=/run/munge

slurm_say() {
    echo "scripts/slurm.sh: $*" >&2
}

slurm_present() {
    command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || return 1
    command -v slurmd >/dev/null 2>&1 || [ -x /usr/sbin/slurmd ] || return 1
    command -v sbatch >/dev/null 2>&1 || return 1
    command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || return 1
    command -v munge >/dev/null 2>&1 || return 1
    command -v unmunge >/dev/null 2>&1 || return 1
}

slurm_munged_bin() {
    if [ -x /usr/sbin/munged ]; then
        echo /usr/sbin/munged
    else
        command -v munged
    fi
}

# munge -n | unmunge: whether a credential made now is accepted now.
slurm_munge_works() {
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

slurm_install() {
    if ! slurm_present; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            slurm_say "installing slurm-wlm and munge with apt-get"
            if ! apt-get update -qq >&2 ||
                ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                    slurm-wlm munge >&2; then
                slurm_say "apt-get install slurm-wlm munge failed"
                return 1
            fi
        else
            slurm_say "the Slurm tests need slurmctld, slurmd, sbatch (slurm-wlm) and munged (munge); install them (as root: apt-get install slurm-wlm munge) or run this script as root"
            return 1
        fi
        if ! slurm_present; then
            slurm_say "slurm-wlm and munge installed, but slurmctld, slurmd, sbatch, munged, munge or unmunge is still missing"
            return 1
        fi
    fi

    if slurm_munge_works; then
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        slurm_say "munged is not answering (munge -n | unmunge fails) and only root can start it here; start munged (e.g. as root: scripts/test.sh) and retry"
        return 1
    fi

    # The package creates the key; make one if it is missing (a key made by
    # hand must be owned by munge and not readable by anyone else).
    if [ ! -s "$SLURM_MUNGE_KEY" ]; then
        slurm_say "creating $SLURM_MUNGE_KEY"
        mkdir -p "$(dirname "$SLURM_MUNGE_KEY")"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --force --keyfile="$SLURM_MUNGE_KEY" >&2 || return 1
        elif command -v create-munge-key >/dev/null 2>&1; then
            create-munge-key -f >&2 || return 1
        else
            dd if=/dev/urandom of="$SLURM_MUNGE_KEY" bs=1024 count=1 2>/dev/null || return 1
        fi
    fi
    chown munge:munge "$(dirname "$SLURM_MUNGE_KEY")" "$SLURM_MUNGE_KEY" || return 1
    chmod 700 "$(dirname "$SLURM_MUNGE_KEY")" || return 1
    chmod 400 "$SLURM_MUNGE_KEY" || return 1

    # munged refuses to start without its socket directory (nothing creates
    # it outside systemd) and wants its log and state directories owned by
    # munge.
    mkdir -p "$SLURM_MUNGE_RUN" /var/log/munge /var/lib/munge || return 1
    chown munge:munge "$SLURM_MUNGE_RUN" /var/log/munge /var/lib/munge || return 1
    chmod 755 "$SLURM_MUNGE_RUN" || return 1

    munged_bin=$(slurm_munged_bin)
    if [ -z "$munged_bin" ]; then
        slurm_say "munged not found"
        return 1
    fi
    # A munged that died without cleaning up leaves its pid and socket files
    # behind; it refuses to start over a live socket, so only start one when
    # none answers (checked above).
    # munged daemonises once it listens. It refuses to start while another
    # munged holds the socket (one started meanwhile by a parallel test run):
    # what counts is that credentials work afterwards.
    slurm_say "starting munged"
    if ! runuser -u munge -- "$munged_bin" --force >&2; then
        slurm_say "munged did not start; checking whether another one answers"
    fi
    tries=0
    while ! slurm_munge_works; do
        tries=$((tries + 1))
        if [ "$tries" -ge 50 ]; then
            slurm_say "munge -n | unmunge still fails 5 s after starting munged (see /var/log/munge/munged.log)"
            return 1
        fi
        sleep 0.1
    done
    return 0
}
