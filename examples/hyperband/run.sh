#!/bin/sh
# Hyperband example: build the quickstart workload and tunectl, then plan
# (the dry run shows the brackets), launch and report the study in
# examples/hyperband/study.yaml. Extra arguments are passed to
# `tunectl launch`.
set -eu
EXAMPLE_STUDY=examples/hyperband/study.yaml exec "$(dirname "$0")/../quickstart/run.sh" "$@"
