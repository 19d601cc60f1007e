#!/usr/bin/env bash
# The 100,000-attempt ledger of benches/ledger_scale.sh read from S3: moto
# (the S3-compatible server of the tests) on loopback, the same ledger
# copied into a bucket.
#
#   KEEP=1 REUSE=DIR OPTUNA_STORAGES= ROUNDS=0 benches/ledger_scale.sh   # makes DIR/ledger
#   LEDGER_DIR=DIR benches/ledger_s3.sh                 # ROUNDS=1 PEER_OBJECTS=10000
#   TUNECTL=/path/to/tunectl LEDGER_DIR=DIR benches/ledger_s3.sh
#
# What it does (details in docs/benchmarks.md):
#
# 1. Starts moto on a free loopback port (scripts/moto.sh; installed into
#    .cache/ when missing), creates a bucket and copies every file of
#    DIR/ledger into it (32 uploads at a time), the index left out: about
#    200,000 objects (the attempts and their arrival-log entries), 35
#    minutes on the 2-core machine of docs/benchmarks.md.
# 2. ROUNDS rounds, each command under /usr/bin/time -v: `tunectl status`
#    without the index (deleted from the bucket first: the first read,
#    which lists every object, reads every attempt and writes the index;
#    about 15 minutes here), then `status` and `report --format json`
#    with the index.
# 3. The peer in its best form, in the same rounds: a Python client
#    (boto3, one client made before the clock starts, 32 threads over 32
#    pooled connections) that lists the study's
#    attempts and reads PEER_OBJECTS of them (all with PEER_OBJECTS=0):
#    its objects a second against tunectl's first read's says whether the
#    read waits on the server or on tunectl; and the same client's time
#    for one GET, sequentially, the server's time per request.
set -euo pipefail

ROUNDS=${ROUNDS:-1}
PEER_OBJECTS=${PEER_OBJECTS:-10000}
here=$(cd "$(dirname "$0")/.." && pwd)
[[ -n "${LEDGER_DIR:-}" && -d "$LEDGER_DIR/ledger" ]] ||
    { echo "LEDGER_DIR must hold a ledger (DIR/ledger) made by benches/ledger_scale.sh with KEEP=1" >&2; exit 1; }
S=ledger-scale
BUCKET=tunectl-bench-ledger
PREFIX=bench

if [[ -z "${TUNECTL:-}" ]]; then
    (cd "$here" && cargo build --release --bin tunectl --quiet)
    TUNECTL="${CARGO_TARGET_DIR:-$here/target}/release/tunectl"
fi
[[ -x "$TUNECTL" ]] || { echo "no tunectl binary at $TUNECTL" >&2; exit 1; }
/usr/bin/time -v true >/dev/null 2>&1 || { echo "GNU time (/usr/bin/time -v) is required" >&2; exit 1; }

cd "$here"
# shellcheck source=../scripts/moto.sh
. scripts/moto.sh
moto_install
moto_start
trap 'moto_stop' EXIT
py=$here/$MOTO_VENV/bin/python
out=$(mktemp -d "${TMPDIR:-/tmp}/tunectl-ledger-s3.XXXXXX")
trap 'moto_stop; rm -rf "$out"' EXIT

# ------------------------------------------------------------ the bucket
cat > "$out/s3.py" <<'EOF'
import concurrent.futures, os, sys, time
import boto3
from botocore.config import Config

endpoint, bucket, prefix = sys.argv[2], sys.argv[3], sys.argv[4]
# One client for every thread (botocore's clients are thread-safe), made
# before anything is timed, with a connection for each of 32 threads.
the_client = boto3.session.Session().client(
    "s3", endpoint_url=endpoint, config=Config(max_pool_connections=32)
)

def client():
    return the_client

def keys(under):
    pages = client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=under)
    return [o["Key"] for p in pages for o in p.get("Contents", [])]

what = sys.argv[1]
if what == "upload":
    root = sys.argv[5]
    client().create_bucket(Bucket=bucket)
    files = []
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            rel = os.path.relpath(path, root)
            if "/index/" in "/" + rel:
                continue
            files.append((path, prefix + "/" + rel))
    def put(pk):
        with open(pk[0], "rb") as f:
            client().put_object(Bucket=bucket, Key=pk[1], Body=f.read())
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        list(ex.map(put, files))
    print(len(files))
elif what == "drop-index":
    for k in keys(prefix + "/" + sys.argv[5] + "/index/"):
        client().delete_object(Bucket=bucket, Key=k)
elif what == "read-all":
    t0 = time.perf_counter()
    names = keys(prefix + "/" + sys.argv[5] + "/trials/")
    t1 = time.perf_counter()
    if int(sys.argv[6]) > 0:
        names = names[: int(sys.argv[6])]
    def get(k):
        return len(client().get_object(Bucket=bucket, Key=k)["Body"].read())
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        size = sum(ex.map(get, names))
    t2 = time.perf_counter()
    print(f"{len(names)} {size} {t1 - t0:.3f} {t2 - t1:.3f} {len(names) / (t2 - t1):.0f}")
elif what == "one-get":
    k = keys(prefix + "/" + sys.argv[5] + "/study.json")[0]
    n = 300
    t0 = time.perf_counter()
    for _ in range(n):
        client().get_object(Bucket=bucket, Key=k)["Body"].read()
    print(f"{(time.perf_counter() - t0) / n * 1000:.2f}")
EOF
s3() { "$py" "$out/s3.py" "$1" "$TUNECTL_TEST_S3_ENDPOINT" "$BUCKET" "$PREFIX" "${@:2}"; }
echo "copying $LEDGER_DIR/ledger into s3://$BUCKET/$PREFIX" >&2
t0=$EPOCHREALTIME
objects=$(s3 upload "$LEDGER_DIR/ledger")
t1=$EPOCHREALTIME
echo "$objects objects copied in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b - a}') s" >&2
URL=s3://$BUCKET/$PREFIX

timed() { # $1 = label, rest = command; appends "label wall cpu rss_mib" to $out/times
    local label=$1
    shift
    /usr/bin/time -v -o "$out/t" "$@" > /dev/null 2> "$out/err" ||
        { cat "$out/err" >&2; echo "$label failed" >&2; exit 1; }
    awk -v l="$label" '
        /Elapsed \(wall clock\)/ { n = split($NF, p, ":"); w = (n == 3) ? p[1] * 3600 + p[2] * 60 + p[3] : p[1] * 60 + p[2] }
        /User time/ { u = $NF } /System time/ { s = $NF }
        /Maximum resident/ { r = $NF / 1024 }
        END { printf "%s %.2f %.2f %.0f\n", l, w, u + s, r }' "$out/t" >> "$out/times"
}

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round of $ROUNDS" >&2
    s3 drop-index "$S"
    timed "status, no index" "$TUNECTL" status "$S" --ledger "$URL"
    timed "status, indexed" "$TUNECTL" status "$S" --ledger "$URL"
    timed "report, indexed" "$TUNECTL" report "$S" --ledger "$URL" --format json
    read -r n _ list_s get_s rate < <(s3 read-all "$S" "$PEER_OBJECTS")
    echo "boto3, list the attempts $list_s 0 0" >> "$out/times"
    echo "boto3, read $n of them (32 threads; $rate a second) $get_s 0 0" >> "$out/times"
    echo "boto3, one GET (ms) $(s3 one-get "$S") 0 0" >> "$out/times"
done

echo "| read | median wall, s | CPU, s | peak RSS, MiB |"
echo "|---|---|---|---|"
awk '{ label = $1; for (i = 2; i <= NF - 3; i++) label = label " " $i
       w[label] = w[label] " " $(NF - 2); c[label] = $(NF - 1); r[label] = $NF
       if (!(label in seen)) { seen[label] = 1; order[++k] = label } }
     END { for (i = 1; i <= k; i++) { l = order[i]; n = split(w[l], v, " ")
             # median of the rounds
             for (a = 1; a <= n; a++) for (b = a + 1; b <= n; b++) if (v[b] < v[a]) { t = v[a]; v[a] = v[b]; v[b] = t }
             printf "| %s | %s | %s | %s |\n", l, v[int((n + 1) / 2)], c[l], r[l] } }' "$out/times"
echo
echo "$objects objects in the bucket; moto at $TUNECTL_TEST_S3_ENDPOINT"
