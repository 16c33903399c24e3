#!/bin/sh
# The cross-node transport's ceiling: ucx_perftest between two processes,
# tag_bw over the ladder of bench/bench_common.c (8 B x4 .. max) and tag_lat
# at 8 B, written in the CSV columns every bench source shares (source
# ucx_<tls>, ops tag_bw and tag_lat, ranks 2).
#
# Usage: scripts/bench_ucx.sh [-o CSV] [-m MAX_BYTES] [-t TLS] [-H HOST]
#                             [-p PORT] [-i ITERS]
#   -t  UCX_TLS for both sides (tcp: loopback TCP, what this machine has)
#   -H  the server's address: 127.0.0.1 (default) starts the server here;
#       any other host must run `scripts/bench_ucx.sh -S` (server mode) with
#       the same -m/-t/-p, so the rows for real nodes come from the same
#       script when multi-node spcoll rows are added beside them.
# As a library: `BENCH_UCX_LIB=1 . scripts/bench_ucx.sh` defines
# ucx_point TEST SIZE ITERS (prints one CSV row) without running anything.
# Prints numbers; asserts nothing.
set -u

UCX_CSV=ucx.csv
UCX_MAX=${BENCH_MAX_BYTES:-1073741824}
UCX_TLS_SET=tcp
UCX_HOST=127.0.0.1
UCX_PORT=13370
UCX_ITERS=${BENCH_ITERS:-200}
UCX_SERVER_ONLY=0

# Iterations at a size: bench_iters (x50 for these cheap point-to-point
# messages, at least 3), as bench_common.c does for the collectives.
ucx_iters() {
  size=$1 base=$(($2 * 50))
  if [ "$size" -le 1048576 ]; then echo "$base"; return; fi
  n=$((base * 1048576 / size))
  [ "$n" -lt 3 ] && n=3
  echo "$n"
}

# ucx_point TEST SIZE ITERS: one ucx_perftest run; prints a CSV row.
# The "Final:" line holds iterations, overhead (us: 50th percentile,
# average, overall), bandwidth (MB/s, i.e. MiB/s: average, overall) and
# message rate. For tag_lat the overhead is half a round trip. The server
# is given a moment to listen; a client that finds no server is retried.
ucx_point() {
  test=$1 size=$2 iters=$3
  warm=$((iters / 10 + 1))
  if [ "$UCX_HOST" = 127.0.0.1 ]; then
    UCX_TLS=$UCX_TLS_SET ucx_perftest -p "$UCX_PORT" >/dev/null 2>&1 &
    spid=$!
    sleep 0.3
  fi
  line=
  for try in 1 2 3; do
    line=$(UCX_TLS=$UCX_TLS_SET timeout 300 ucx_perftest "$UCX_HOST" \
      -p "$UCX_PORT" -t "$test" -s "$size" -n "$iters" -w "$warm" 2>&1 |
      grep '^Final:')
    [ -n "$line" ] && break
    sleep "$try"
  done
  [ "$UCX_HOST" = 127.0.0.1 ] && wait "$spid" 2>/dev/null
  if [ -z "$line" ]; then
    echo "bench_ucx: ucx_perftest -t $test -s $size gave no result" >&2
    return 1
  fi
  echo "$line" | awk -v src="ucx_$UCX_TLS_SET" -v op="$test" -v size="$size" \
    -v iters="$iters" '{
      gbs = $7 * 1048576 / 1e9;
      if (op == "tag_lat")   # half round trips: report the round trip
        printf "%s,%s,2,%d,%d,bytes,%.2f,%.4f,%.4f,%.2f,,%d,round trip\n",
          src, op, size, size, 2 * $4, gbs, gbs, 2 * $3, iters;
      else                   # streamed: the time per message at that rate
        printf "%s,%s,2,%d,%d,bytes,%.2f,%.4f,%.4f,,,%d,one direction\n",
          src, op, size, size, size / (gbs * 1e3), gbs, gbs, iters;
    }'
}

ucx_ladder() {
  echo "source,op,ranks,size_bytes,count,type,time_us,algbw_gbs,busbw_gbs,p50_us,p99_us,iters,note"
  ucx_point tag_lat 8 "$(ucx_iters 8 "$UCX_ITERS")" || return 1
  size=8
  while :; do
    ucx_point tag_bw "$size" "$(ucx_iters "$size" "$UCX_ITERS")" || return 1
    [ "$size" -ge "$UCX_MAX" ] && break
    size=$((size * 4))
    [ "$size" -gt "$UCX_MAX" ] && size=$UCX_MAX
  done
}

# Server mode for a remote -H: one server per point, in ladder order.
ucx_serve() {
  n=$(( $(ucx_ladder_count) ))
  i=0
  while [ "$i" -lt "$n" ]; do
    UCX_TLS=$UCX_TLS_SET ucx_perftest -p "$UCX_PORT" >/dev/null 2>&1 || return 1
    i=$((i + 1))
  done
}

ucx_ladder_count() {
  n=2 size=8   # tag_lat, then tag_bw at 8 B
  while [ "$size" -lt "$UCX_MAX" ]; do
    size=$((size * 4)); n=$((n + 1))
  done
  echo "$n"
}

[ "${BENCH_UCX_LIB:-0}" = 1 ] && return 0 2>/dev/null

while getopts o:m:t:H:p:i:S opt; do
  case $opt in
  o) UCX_CSV=$OPTARG ;;
  m) UCX_MAX=$OPTARG ;;
  t) UCX_TLS_SET=$OPTARG ;;
  H) UCX_HOST=$OPTARG ;;
  p) UCX_PORT=$OPTARG ;;
  i) UCX_ITERS=$OPTARG ;;
  S) UCX_SERVER_ONLY=1 ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
if ! command -v ucx_perftest >/dev/null 2>&1; then
  echo "bench_ucx: no ucx_perftest (Debian ucx-utils)" >&2
  exit 2
fi
if [ "$UCX_SERVER_ONLY" = 1 ]; then
  ucx_serve
  exit $?
fi
echo "# ucx_perftest, UCX_TLS=$UCX_TLS_SET, $UCX_HOST: tag_lat 8 B (round trip) and tag_bw 8 B .. $UCX_MAX B"
tmp="$UCX_CSV.tmp"
if ! ucx_ladder >"$tmp"; then
  rm -f "$tmp"
  exit 1
fi
mv "$tmp" "$UCX_CSV"
awk -F, 'NR > 1 { printf "%-8s %-8s %11d B  %10.1f us  %8.3f GB/s  (%s)\n", $1, $2, $4, $7, $8, $13 }' "$UCX_CSV"
echo "# wrote $UCX_CSV"
