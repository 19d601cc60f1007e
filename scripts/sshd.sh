#!/bin/sh
# OpenSSH for the ssh transport tests: tests/it/support/sshd.rs starts real sshd
# hosts on loopback addresses (one /usr/sbin/sshd per host, started and
# stopped by the tests themselves) and drives them with the ssh client.
#
#   . scripts/sshd.sh        (sourced by scripts/test.sh, from the repository root)
#   sshd_install             install openssh-server and openssh-client with
#                            apt-get when /usr/sbin/sshd, ssh or ssh-keygen is
#                            missing (root only; fails with a message
#                            otherwise), and create /run/sshd
#
# Nothing is started here and no system sshd is configured: apt does not start
# the service in a container, and the tests use their own configs and keys.

SSHD_BIN=/usr/sbin/sshd

sshd_say() {
    echo "scripts/sshd.sh: $*" >&2
}

sshd_present() {
    [ -x "$SSHD_BIN" ] &&
        command -v ssh >/dev/null 2>&1 &&
        command -v ssh-keygen >/dev/null 2>&1
}

sshd_install() {
    if ! sshd_present; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            sshd_say "installing openssh-server and openssh-client with apt-get"
            if ! apt-get update -qq >&2 ||
                ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                    --no-install-recommends openssh-server openssh-client >&2; then
                sshd_say "apt-get install openssh-server openssh-client failed"
                return 1
            fi
        else
            sshd_say "the ssh tests need $SSHD_BIN, ssh and ssh-keygen; install openssh-server and openssh-client (as root: apt-get install openssh-server openssh-client) or run this script as root"
            return 1
        fi
        if ! sshd_present; then
            sshd_say "openssh-server/openssh-client installed, but $SSHD_BIN, ssh or ssh-keygen is still missing"
            return 1
        fi
    fi
    # sshd exits with "Missing privilege separation directory" without it,
    # and nothing creates it outside systemd. The tests create it too.
    if [ ! -d /run/sshd ] && [ "$(id -u)" = 0 ]; then
        mkdir -p /run/sshd && chmod 755 /run/sshd
    fi
    return 0
}
