#!/bin/sh
# Headless Chromium for the HTML report's test: tests/it/html_report.rs renders
# reports with `tunectl report --format html` and opens each page in
# `chromium --headless --dump-dom` to check its charts, tables and script.
#
#   . scripts/chromium.sh    (sourced by scripts/test.sh, from the repository root)
#   chromium_install         install Debian's chromium with apt-get when
#                            /usr/bin/chromium is missing (root only; fails
#                            with a message otherwise)
#
# Nothing is started here: the test starts and stops its own browser, with a
# fresh profile directory and a time limit.

CHROMIUM_BIN=${TUNECTL_TEST_CHROMIUM:-/usr/bin/chromium}

chromium_say() {
    echo "scripts/chromium.sh: $*" >&2
}

chromium_install() {
    if [ -x "$CHROMIUM_BIN" ]; then
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        chromium_say "installing chromium with apt-get"
        if ! apt-get update -qq >&2 ||
            ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends chromium >&2; then
            chromium_say "apt-get install chromium failed"
            return 1
        fi
    else
        chromium_say "the HTML report test needs $CHROMIUM_BIN; install chromium (as root: apt-get install --no-install-recommends chromium) or run this script as root"
        return 1
    fi
    if [ ! -x "$CHROMIUM_BIN" ]; then
        chromium_say "chromium installed, but $CHROMIUM_BIN is still missing"
        return 1
    fi
}
