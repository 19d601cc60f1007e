#!/usr/bin/env bash
# vllm-serve.sh: one trial of templates/vllm-serve.yaml.
#
#   vllm-serve.sh PORT [vllm serve ARGS...] --bench [vllm bench serve ARGS...]
#
# Starts `vllm serve ARGS --port PORT` in the background (its output goes to
# server.log in the trial directory), waits until http://127.0.0.1:PORT/health
# answers, runs `vllm bench serve --port PORT ARGS` against it, and stops the
# server. The benchmark's own flags (--save-result --result-filename ...) say
# where the numbers go; tunectl reads them through the study's `result:`.
#
# When the server dies or never gets ready, or the benchmark fails, the last
# lines of server.log are copied to stderr, so tunectl classifies the failure
# from them (a "CUDA out of memory" there makes the trial an `oom`).
#
# Needs bash and curl on the host. VLLM_STARTUP_TIMEOUT (seconds, default
# 900) bounds the wait for /health; tunectl's trial.timeout bounds the whole
# run, and when it fires tunectl kills the process group (this script, the
# server and its workers).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: vllm-serve.sh PORT [serve args...] --bench [bench args...]" >&2
  exit 2
fi
port=$1
shift
serve=()
while [[ $# -gt 0 && $1 != --bench ]]; do
  serve+=("$1")
  shift
done
if [[ $# -eq 0 ]]; then
  echo "vllm-serve.sh: no --bench in the arguments" >&2
  exit 2
fi
shift # --bench
bench=("$@")

log=server.log
vllm serve "${serve[@]}" --port "$port" >"$log" 2>&1 &
server=$!

server_tail() {
  echo "vllm-serve.sh: $1; last lines of $log:" >&2
  tail -n 60 "$log" >&2 || true
}
stop_server() {
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
}
trap stop_server EXIT

deadline=$((SECONDS + ${VLLM_STARTUP_TIMEOUT:-900}))
until curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
  if ! kill -0 "$server" 2>/dev/null; then
    server_tail "vllm serve exited during start-up"
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    server_tail "vllm serve was not ready after ${VLLM_STARTUP_TIMEOUT:-900} s"
    exit 1
  fi
  sleep 2
done

if ! vllm bench serve --port "$port" "${bench[@]}"; then
  server_tail "vllm bench serve failed"
  exit 1
fi
