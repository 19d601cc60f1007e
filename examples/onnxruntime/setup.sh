#!/bin/sh
# Install what the onnxruntime example needs: onnxruntime, onnx and numpy
# from PyPI, pinned, into a virtual environment at .cache/onnxruntime-venv
# under the repository root (git-ignored). Run from anywhere; it does
# nothing when the environment is there and imports all three. Needs
# python3 with its venv module (on Debian: python3-venv, installed with
# apt-get when missing and the script runs as root) and network access to
# PyPI on the first run (there are onnxruntime wheels for CPython 3.11 to
# 3.13 on x86_64 Linux with glibc 2.28 or newer, among others). Prints the
# environment's python on stdout.
set -eu

cd "$(dirname "$0")/../.."

VENV_SAY=examples/onnxruntime/setup.sh
. ./scripts/venv.sh
venv_setup onnxruntime-venv "numpy, onnx, onnxruntime" \
    onnxruntime==1.32.0 onnx==1.23.2 numpy==2.4.6
