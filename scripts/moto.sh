#!/bin/sh
# The S3-compatible test server for the ledger tests (tests/it/ledger_store.rs):
# moto from PyPI, in a virtual environment under .cache/ (git-ignored).
#
#   . scripts/moto.sh        (sourced by scripts/test.sh, from the repository root)
#   moto_install             install moto into .cache/moto-venv when missing
#                            (scripts/venv.sh)
#   moto_start               start it on a free loopback port, wait until it
#                            answers, and export TUNECTL_TEST_S3_ENDPOINT and
#                            throwaway AWS_* settings for the tests
#   moto_stop                stop it (scripts/test.sh traps EXIT)
#
# It creates no bucket: every test creates its own. Everything lives in the
# server's memory and is gone when it stops.

MOTO_VERSION=5.2.5
MOTO_VENV=.cache/moto-venv
MOTO_LOG=.cache/moto.log
MOTO_PID=

moto_say() {
    echo "scripts/moto.sh: $*" >&2
}

moto_install() {
    VENV_SAY=scripts/moto.sh
    . ./scripts/venv.sh
    # moto.server needs the [server] extra (flask): its import checks it.
    venv_setup moto-venv "moto, moto.server" "moto[server]==$MOTO_VERSION" >/dev/null
}

# Does an HTTP server answer on 127.0.0.1:$1? (Any HTTP status counts.)
moto_answers() {
    "$MOTO_VENV/bin/python" - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen("http://127.0.0.1:%s/" % sys.argv[1], timeout=1)
except urllib.error.HTTPError:
    pass
EOF
}

moto_free_port() {
    "$MOTO_VENV/bin/python" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

moto_start() {
    tries=0
    while [ "$tries" -lt 3 ]; do
        tries=$((tries + 1))
        port=$(moto_free_port) || return 1
        "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$MOTO_LOG" 2>&1 &
        MOTO_PID=$!
        # Ready in about 0.5 s; give it 30 s at most.
        waited=0
        while [ "$waited" -lt 150 ]; do
            if ! kill -0 "$MOTO_PID" 2>/dev/null; then
                break
            fi
            if moto_answers "$port"; then
                TUNECTL_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
                # Throwaway values made now: the server accepts any.
                secret="throwaway-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
                export TUNECTL_TEST_S3_ENDPOINT
                export AWS_ACCESS_KEY_ID=test
                export AWS_SECRET_ACCESS_KEY="$secret"
                export AWS_REGION=us-east-1
                export AWS_ALLOW_HTTP=true
                export AWS_ENDPOINT_URL="$TUNECTL_TEST_S3_ENDPOINT"
                unset AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_REGION
                moto_say "moto answers at $TUNECTL_TEST_S3_ENDPOINT (pid $MOTO_PID)"
                return 0
            fi
            sleep 0.2
            waited=$((waited + 1))
        done
        moto_stop
        moto_say "moto did not start on port $port (try $tries); its log:"
        cat "$MOTO_LOG" >&2 || true
    done
    return 1
}

moto_stop() {
    if [ -n "$MOTO_PID" ]; then
        kill "$MOTO_PID" 2>/dev/null || true
        wait "$MOTO_PID" 2>/dev/null || true
        MOTO_PID=
    fi
}
