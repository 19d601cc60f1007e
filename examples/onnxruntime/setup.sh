#!/bin/sh
# Install what the onnxruntime example needs: onnxruntime, onnx and numpy
# from PyPI, pinned, into a virtual environment at .cache/onnxruntime-venv
# under the repository root (git-ignored). Run from anywhere; it does
# nothing when the environment is there and imports all three. Needs
# python3 with its venv module (on Debian: python3-venv, installed with
# apt-get when missing and the script runs as root) and network access to
# PyPI on the first run. Prints the environment's python on stdout.
set -eu

cd "$(dirname "$0")/../.."

ORT_VERSION=1.32.0
ONNX_VERSION=1.23.2
NUMPY_VERSION=2.4.6
VENV=.cache/onnxruntime-venv

say() {
    echo "examples/onnxruntime/setup.sh: $*" >&2
}

ready() {
    [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c 'import numpy, onnx, onnxruntime' >/dev/null 2>&1
}

if ready; then
    printf '%s\n' "$PWD/$VENV/bin/python"
    exit 0
fi

mkdir -p .cache
rm -rf "$VENV"
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    # Debian's python3 makes venvs only with python3-venv.
    rm -rf "$VENV"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing python3 and python3-venv with apt-get"
        apt-get update -qq >&2 &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >&2 || {
            say "apt-get install python3 python3-venv failed"
            exit 1
        }
    fi
    python3 -m venv "$VENV" || {
        say "cannot create a Python virtual environment at $VENV (install python3 and python3-venv)"
        rm -rf "$VENV"
        exit 1
    }
fi

say "installing onnxruntime $ORT_VERSION, onnx $ONNX_VERSION and numpy $NUMPY_VERSION from PyPI into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    "onnxruntime==$ORT_VERSION" "onnx==$ONNX_VERSION" "numpy==$NUMPY_VERSION" >&2 || {
    say "pip install from PyPI failed (no network, or no wheel of onnxruntime $ORT_VERSION for this Python and platform: there are wheels for CPython 3.11 to 3.13 on x86_64 Linux with glibc 2.28 or newer, among others)"
    rm -rf "$VENV"
    exit 1
}
if ! ready; then
    say "installed, but '$VENV/bin/python -c \"import numpy, onnx, onnxruntime\"' fails:"
    "$VENV/bin/python" -c 'import numpy, onnx, onnxruntime' >&2 || true
    rm -rf "$VENV"
    exit 1
fi
printf '%s\n' "$PWD/$VENV/bin/python"
