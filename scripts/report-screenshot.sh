#!/bin/sh
# Render a tunectl HTML report to a PNG with headless Chromium (for docs; not
# run by scripts/test.sh or CI).
#
#   scripts/report-screenshot.sh REPORT.html OUT.png [WIDTH [HEIGHT]]
#
# REPORT.html is what `tunectl report STUDY --format html -o REPORT.html`
# wrote. The window is WIDTH x HEIGHT CSS pixels (default 1200 x 2400); the
# page below HEIGHT is cut off. Needs chromium (Debian: apt-get install
# --no-install-recommends chromium; another path with CHROMIUM=...).
set -eu

if [ $# -lt 2 ]; then
    echo "usage: $0 REPORT.html OUT.png [WIDTH [HEIGHT]]" >&2
    exit 2
fi
report=$1
out=$2
width=${3:-1200}
height=${4:-2400}
chromium=${CHROMIUM:-chromium}

case $report in
/*) ;;
*) report=$(pwd)/$report ;;
esac
case $out in
/*) ;;
*) out=$(pwd)/$out ;;
esac
if [ ! -f "$report" ]; then
    echo "$0: no such file: $report" >&2
    exit 1
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# A fresh profile and no background traffic: the page needs no network.
timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic \
    --no-first-run --disable-background-networking --disable-component-update \
    --disable-sync --hide-scrollbars --user-data-dir="$profile" \
    --window-size="$width,$height" --screenshot="$out" "file://$report" \
    >/dev/null 2>&1
if [ ! -s "$out" ]; then
    echo "$0: chromium wrote no screenshot to $out" >&2
    exit 1
fi
echo "$out"
