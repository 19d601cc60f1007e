# The persistent agent's own functions, after agent.sh (see
# persistent_agent in wire.rs). The shell reads its commands from the
# channel as they come; each attempt's request defines tc_a and calls
# tc_spawn, which runs it in the background: the shell goes back to reading
# its input (silent until the reply's end) while the trial runs.
tc_job=
tc_cur=
tc_spawn() {
  # The previous attempt has sent its end: reap it.
  [ -z "$tc_job" ] || wait "$tc_job" 2>/dev/null
  tc_cur=$1
  tc_a </dev/null &
  tc_job=$!
}
tc_kill() {
  # The launcher stops a run (its timeout, Ctrl-C): TERM to its group, KILL
  # after the grace period; in the background, the shell keeps reading.
  (
    kill -s TERM -- "-$1" 2>/dev/null || kill -s TERM "$1" 2>/dev/null || exit 0
    tc_i=0
    while [ $tc_i -lt 2 ]; do
      sleep 1
      kill -s 0 -- "-$1" 2>/dev/null || kill -s 0 "$1" 2>/dev/null || exit 0
      tc_i=$((tc_i + 1))
    done
    kill -s KILL -- "-$1" 2>/dev/null || kill -s KILL "$1" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
}
tc_bye() {
  # The input ended (the launcher or its connection is gone): stop the
  # running attempt (no next run starts) and kill its run's group.
  [ -n "$tc_job" ] && kill -s 0 "$tc_job" 2>/dev/null || return 0
  kill -s TERM "$tc_job" 2>/dev/null
  tc_p=$(cat "$tc_cur/.tunectl-run-pid" 2>/dev/null)
  [ -n "$tc_p" ] || return 0
  kill -s TERM -- "-$tc_p" 2>/dev/null || kill -s TERM "$tc_p" 2>/dev/null
  sleep 2
  kill -s KILL -- "-$tc_p" 2>/dev/null || kill -s KILL "$tc_p" 2>/dev/null
}
trap tc_bye EXIT
trap 'exit 1' HUP TERM
