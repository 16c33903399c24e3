#!/bin/sh
# multinode_scale: 16 daemons on this machine (loopback UCX, own ports) and
# world 64, 4 ranks a node: the op suites (every op kind, unaligned sizes,
# group split across nodes: ring x Ulysses, hybrid) at world 64, then the fault phase
# (a node killed under a world-64 group: every rank of it fails naming the
# node, a group of one node and one across the other nodes go on, the
# restarted node joins again). Bounded to a few minutes on 2 cores;
# `make check-scale` runs the longer variant (SPT_SCALE_LONG=1: the copy
# suite at 8 ranks a node too, and the fault phase three times).
# Usage: tests/integ/multinode_scale.sh BUILD
BUILD=${1:-$(dirname "$(dirname "${SPCOLLD:-build/bin/spcolld}")")}
fail=0 checks=0
one() {
  name=$1; shift
  log="$BUILD/tests/multinode_scale_$name.log"
  env "$@" >"$log" 2>&1
  rc=$?
  line=$(grep -E '^[0-9]+%: Checks' "$log" | tail -n 1)
  echo "  $name: exit $rc, $line"
  n=$(echo "$line" | sed -n 's/.*Checks: \([0-9]*\).*/\1/p')
  checks=$((checks + ${n:-0}))
  [ $rc -eq 0 ] || { fail=$((fail + 1)); tail -n 20 "$log"; }
}
worlds=64 rworlds=64
# (The reduce suite stays at 64: its references hold every rank's input
# in every rank, 128 x 128 large inputs do not fit this machine's memory.)
[ "${SPT_SCALE_LONG:-0}" = 1 ] && worlds="64 128"
# Under ASan/UBSan (make check-asan-only) the suites run at world 32, 2
# ranks a node, still 16 daemons: the reduce suite's references (every
# rank sums all ranks' data) at world 64 outlast its 300 s case limit,
# and the plain run covers world 64 already.
[ "${SPC_SANITIZED:-0}" = 1 ] && worlds=32 rworlds=32
for w in $worlds; do
  one "copy_w$w" SPT_NODES=16 SPT_WORLD=$w "$BUILD/tests/test_ops_copy"
done
for w in $rworlds; do
  one "reduce_w$w" SPT_NODES=16 SPT_WORLD=$w "$BUILD/tests/test_ops_reduce"
done
rounds=1
[ "${SPT_SCALE_LONG:-0}" = 1 ] && rounds=3
for i in $(seq 1 $rounds); do
  one "fault_$i" SPT_FAULT_NODES=16 "$BUILD/tests/test_multinode_fault"
done
if [ $fail -eq 0 ]; then
  echo "100%: Checks: $checks, Failures: 0, Errors: 0"
  exit 0
fi
echo "$fail of the scale runs failed"
exit 1
