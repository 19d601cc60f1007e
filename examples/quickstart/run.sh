#!/bin/sh
# Quickstart: build the example workload and tunectl, then plan, launch and
# report the study in examples/quickstart/study.yaml (or the study named by
# EXAMPLE_STUDY, relative to the repository root: examples/hyperband/run.sh
# uses it). Extra arguments are passed to `tunectl launch` (a `--ledger`
# among them to `tunectl report` too).
set -eu

# Run from the repository root, wherever the script is called from.
cd "$(dirname "$0")/../.."

study=${EXAMPLE_STUDY:-examples/quickstart/study.yaml}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# build_exe NAME KIND CARGO_ARGS...: build in release mode and print the path of
# the executable for target NAME of kind KIND ("example" or "bin"). Reading it
# from cargo's JSON messages respects CARGO_TARGET_DIR and .cargo/config.toml.
build_exe() {
    name=$1
    kind=$2
    shift 2
    cargo build --release "$@" --message-format=json >"$tmp"
    exe=$(grep '"reason":"compiler-artifact"' "$tmp" |
        grep "\"kind\":\[\"$kind\"\]" |
        grep "\"name\":\"$name\"" |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' |
        tail -n 1)
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "run.sh: cannot find the $kind '$name' built by cargo" >&2
        exit 1
    fi
    printf '%s\n' "$exe"
}

echo "== building the quickstart workload" >&2
workload=$(build_exe quickstart example --example quickstart)
mkdir -p examples/quickstart/bin
cp -f "$workload" examples/quickstart/bin/quickstart

echo "== building tunectl" >&2
tunectl=$(build_exe tunectl bin --bin tunectl)

echo "== tunectl plan --dry-run" >&2
"$tunectl" plan "$study" --dry-run

echo "== tunectl launch" >&2
"$tunectl" launch "$study" "$@"

# The report reads the ledger the launch wrote: the one `--ledger` named
# among the extra arguments, if any.
ledger=
while [ $# -gt 0 ]; do
    case $1 in
        --ledger) ledger=${2:-}; shift ;;
        --ledger=*) ledger=${1#--ledger=} ;;
    esac
    shift
done

echo "== tunectl report" >&2
if [ -n "$ledger" ]; then
    "$tunectl" report "$study" --ledger "$ledger"
else
    "$tunectl" report "$study"
fi
