umask 022
if command -v setsid >/dev/null 2>&1; then tc_setsid=setsid; else tc_setsid=; fi
tc_watch() {
  # Kill the run's group at the timeout; killed itself, it stops its sleep.
  (
    trap 'kill -s TERM "$tc_s" 2>/dev/null; exit 0' TERM
    sleep "$tc_timeout" & tc_s=$!
    wait "$tc_s" || exit 0
    : >.tunectl-timed-out
    kill -s TERM -- "-$tc_pid" 2>/dev/null || kill -s TERM "$tc_pid" 2>/dev/null
    sleep 2
    kill -s KILL -- "-$tc_pid" 2>/dev/null || kill -s KILL "$tc_pid" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  tc_dog=$!
}
tc_guard() {
  # The launcher holds the session's input open while the attempt runs and
  # sends nothing on it: its end means the launcher or its connection is
  # gone. Then stop the wrapper (no next run starts) and kill the running
  # run's group. Stopped itself (the attempt is over), it stops its cat.
  tc_main_pid=$$
  (
    trap 'kill -s TERM "$tc_c" 2>/dev/null; exit 0' TERM
    cat <&3 >/dev/null 2>&1 & tc_c=$!
    wait "$tc_c"
    kill -s TERM "$tc_main_pid" 2>/dev/null
    tc_p=$(cat .tunectl-run-pid 2>/dev/null)
    [ -n "$tc_p" ] || exit 0
    kill -s TERM -- "-$tc_p" 2>/dev/null || kill -s TERM "$tc_p" 2>/dev/null
    sleep 2
    kill -s KILL -- "-$tc_p" 2>/dev/null || kill -s KILL "$tc_p" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  tc_guard_pid=$!
  exec 3<&-
}
tc_count() {
  # tc_n: the size of file $1. (A BSD wc pads it with spaces; no `tr`: each
  # process counts, once per file and attempt.)
  tc_n=$(wc -c <"$1")
  tc_n=${tc_n##* }
}
tc_stream() {
  # Size, tail and (when $3 > 0) head of a stream; nothing for an empty one.
  [ -s "$2" ] || return 0
  tc_count "$2"
  printf '@@tunectl size %s %s\n' "$1" "$tc_n"
  tc_k=$tc_n; [ "$tc_k" -gt TC_TAIL ] && tc_k=TC_TAIL
  printf '@@tunectl file %s_tail %s\n' "$1" "$tc_k"
  tail -c "$tc_k" <"$2"
  printf '\n'
  if [ "$3" -gt 0 ] && [ "$tc_n" -gt TC_TAIL ]; then
    tc_k=$3
    printf '@@tunectl file %s_head %s\n' "$1" "$tc_k"
    head -c "$tc_k" <"$2"
    printf '\n'
  fi
}
tc_file() {
  if [ -f "$2" ]; then
    tc_count "$2"
    [ "$tc_n" -gt "$3" ] && tc_n=$3
    printf '@@tunectl file %s %s\n' "$1" "$tc_n"
    head -c "$tc_n" <"$2"
    printf '\n'
  else
    printf '@@tunectl missing %s\n' "$1"
  fi
}
tc_why() {
  # tc_w: why $1 is not read; empty for a regular file (a symlink is
  # followed only to one) of at most $2 bytes, whose size is then in tc_n.
  # Nothing else is opened: a FIFO would block, a device never end. (It
  # sets variables rather than printing: a command substitution is one
  # more process per file.)
  tc_w=
  if [ ! -e "$1" ] && [ ! -L "$1" ]; then tc_w="was not written"; return 0; fi
  tc_l=; [ -L "$1" ] && tc_l="a symlink to "
  if [ ! -f "$1" ]; then
    if [ ! -e "$1" ]; then tc_k="nothing (a dangling symlink)"
    elif [ -d "$1" ]; then tc_k="a directory"
    elif [ -p "$1" ]; then tc_k="a FIFO"
    elif [ -c "$1" ]; then tc_k="a character device"
    elif [ -b "$1" ]; then tc_k="a block device"
    elif [ -S "$1" ]; then tc_k="a socket"
    else tc_k="something else"; fi
    tc_w="is $tc_l$tc_k, not a regular file"; return 0
  fi
  tc_count "$1"
  if [ "$tc_n" -gt "$2" ]; then tc_w="is $tc_n bytes, over the limit of $(tc_size "$2")"; fi
}
tc_rfile() {
  # A regular file of at most $3 bytes, else why not.
  tc_why "$2" "$3"
  if [ -z "$tc_w" ]; then
    printf '@@tunectl file %s %s\n' "$1" "$tc_n"
    head -c "$tc_n" <"$2"
    printf '\n'
  else
    printf '@@tunectl missing %s %s\n' "$1" "$tc_w"
  fi
}
tc_size() {
  if [ $(($1 % 1073741824)) -eq 0 ]; then echo "$(($1 / 1073741824)) GiB"
  elif [ $(($1 % 1048576)) -eq 0 ]; then echo "$(($1 / 1048576)) MiB"
  else echo "$1 bytes"; fi
}
tc_sha() {
  tc_to=; command -v timeout >/dev/null 2>&1 && tc_to="timeout $tc_read_limit"
  if command -v sha256sum >/dev/null 2>&1; then $tc_to sha256sum <"$1"
  elif command -v shasum >/dev/null 2>&1; then $tc_to shasum -a 256 <"$1"
  elif command -v openssl >/dev/null 2>&1; then $tc_to openssl dgst -sha256 -r <"$1"
  else echo none
  fi | cut -d' ' -f1
}
tc_digest() {
  tc_why "$2" "$3"
  if [ -z "$tc_w" ]; then
    tc_h=$(tc_sha "$2")
    if [ -n "$tc_h" ]; then
      printf '@@tunectl digest %s %s\n' "$1" "$tc_h"
    else
      printf "@@tunectl digest %s - was still being read at the trial's timeout\n" "$1"
    fi
  else
    printf '@@tunectl digest %s - %s\n' "$1" "$tc_w"
  fi
}
