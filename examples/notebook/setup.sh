#!/bin/sh
# Install what examples/notebook/analyze.py needs: pandas, pyarrow (pandas'
# Parquet reader), DuckDB and matplotlib from PyPI, pinned, into a virtual
# environment at .cache/notebook-venv under the repository root
# (git-ignored). Run from anywhere; it does nothing when the environment is
# there and imports them all. Needs python3 with its venv module (on Debian:
# python3-venv, installed with apt-get when missing and the script runs as
# root) and network access to PyPI on the first run. Prints the
# environment's python on stdout.
set -eu

cd "$(dirname "$0")/../.."

VENV_SAY=examples/notebook/setup.sh
. ./scripts/venv.sh
venv_setup notebook-venv "pandas, pyarrow, duckdb, matplotlib" \
    pandas==3.1.1 pyarrow==26.0.1 duckdb==2.0.1 matplotlib==3.11.2 numpy==2.4.6
