#!/bin/sh
# Two builds' host numbers in one run, in turn: spcoll-bench at 2 and 4
# ranks, 8 B to --max-bytes, and its 8 B latency mode, each build ROUNDS
# times, in turn, the first of each round alternating (before then after,
# after then before, ...), so that both share the machine's states. Prints, per point, the median p50 of each build, the
# ratio after/before, and the spread of the rounds (max/min p50 of each
# build); writes every run's CSV under OUT. Prints numbers, asserts nothing.
# Usage: scripts/bench_before_after.sh BEFORE_BUILD AFTER_BUILD OUT
#        [ROUNDS (3)] [MAX_BYTES (1048576)]
# A build is a folder with bin/spcolld and bin/spcoll-bench, e.g. one
# made in a worktree of the older commit:
#   git worktree add /tmp/before <commit> &&
#   make -C /tmp/before build/bin/spcolld build/bin/spcoll-bench
set -e
[ $# -ge 3 ] || { sed -n 2,14p "$0"; exit 2; }
BEFORE=$1 AFTER=$2 OUT=$3 ROUNDS=${4:-3} MAX=${5:-1048576}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  order="before after"
  [ $((r % 2)) -eq 0 ] && order="after before"
  for side in $order; do
    b=$BEFORE
    [ $side = after ] && b=$AFTER
    for n in 2 4; do
      "$b/bin/spcoll-bench" --spcolld "$b/bin/spcolld" --ranks $n \
        --max-bytes "$MAX" --iters 200 \
        --csv "$OUT/${side}_r${r}_ranks$n.csv" > /dev/null
    done
    "$b/bin/spcoll-bench" --spcolld "$b/bin/spcolld" --latency --ranks 2 \
      --iters 10000 --csv "$OUT/${side}_r${r}_latency.csv" > /dev/null
    echo "# round $r, $side: done"
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import csv, glob, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
pts = {}
for side in ("before", "after"):
    for path in glob.glob(os.path.join(out, side + "_r*_*.csv")):
        lat = path.endswith("_latency.csv")
        with open(path) as f:
            for row in csv.DictReader(f):
                key = ("latency " if lat else "") + row["op"], \
                    int(row["ranks"]), int(row["size_bytes"])
                pts.setdefault(key, {}).setdefault(side, []).append(
                    float(row["p50_us"]))
print("%-22s %5s %10s %10s %10s %7s %9s %9s" % (
    "op", "ranks", "bytes", "before", "after", "a/b", "spread_b",
    "spread_a"))
for key in sorted(pts):
    b, a = pts[key].get("before", []), pts[key].get("after", [])
    if not a or not b:
        continue
    mb, ma = statistics.median(b), statistics.median(a)
    print("%-22s %5d %10d %10.2f %10.2f %7.2f %9.2f %9.2f" % (
        key[0], key[1], key[2], mb, ma, ma / mb if mb else 0,
        max(b) / min(b) if min(b) else 0, max(a) / min(a) if min(a) else 0))
print("# p50 in us, median over %d rounds; spread: max/min p50 over the "
      "rounds of one build" % rounds)
import math
rs = [statistics.median(v["after"]) / statistics.median(v["before"])
      for v in pts.values() if v.get("after") and v.get("before")]
print("# %d points: geometric mean of after/before %.3f; %d above 1.15, "
      "%d below 0.87" % (len(rs), math.exp(sum(map(math.log, rs)) / len(rs)),
                         sum(r > 1.15 for r in rs), sum(r < 0.87 for r in rs)))
PY
