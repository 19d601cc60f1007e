#!/bin/sh
# onnxruntime example: install onnxruntime, onnx and numpy into
# .cache/onnxruntime-venv (setup.sh; once, from PyPI), build tunectl, then
# validate, plan (dry run), launch and report the study in
# examples/onnxruntime/study.yaml. Extra arguments are passed to
# `tunectl launch`.
set -eu

# Run from the repository root, wherever the script is called from.
cd "$(dirname "$0")/../.."

study=examples/onnxruntime/study.yaml
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

echo "== setting up the Python environment (examples/onnxruntime/setup.sh)" >&2
./examples/onnxruntime/setup.sh >/dev/null

# Build tunectl in release mode and find the executable in cargo's JSON
# messages (this respects CARGO_TARGET_DIR and .cargo/config.toml).
echo "== building tunectl" >&2
cargo build --release --bin tunectl --message-format=json >"$tmp"
tunectl=$(grep '"reason":"compiler-artifact"' "$tmp" |
    grep '"kind":\["bin"\]' |
    grep '"name":"tunectl"' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' |
    tail -n 1)
if [ -z "$tunectl" ] || [ ! -x "$tunectl" ]; then
    echo "run.sh: cannot find the tunectl binary built by cargo" >&2
    exit 1
fi

echo "== tunectl validate" >&2
"$tunectl" validate "$study"

echo "== tunectl plan --dry-run" >&2
"$tunectl" plan "$study" --dry-run

# launch exits 3 when a bucket is left a DRAFT (see docs/cli.md): show the
# report anyway, then exit with launch's status.
echo "== tunectl launch" >&2
status=0
"$tunectl" launch "$study" "$@" || status=$?

echo "== tunectl report" >&2
"$tunectl" report "$study"
exit "$status"
