#!/bin/sh
# Run the test binaries of a build: unit suites first, then integration.
# Usage: tests/run.sh BUILD_DIR [client]
#   client: only the client-side suites (used under valgrind).
# SPC_VALGRIND=1 runs each binary under valgrind with leak checking.
# Prints one line per suite (with its seconds, to see where the time
# goes) and a closing line "suites: N passed, N failed, N skipped".
set -u
BUILD=${1:-build}
ONLY=${2:-}
pass=0 fail=0 skip=0
failed=""
export SPCOLLD="$BUILD/bin/spcolld"
export SPC_TEST_DATA="$(dirname "$0")/data"
# The peer fuzzer (unit_daemon_peer_fuzz) runs 20 s under the sanitizers,
# a few seconds plain (longer runs: SPT_FUZZ_SECONDS).
[ "${SPC_SANITIZED:-0}" = 1 ] && export SPT_FUZZ_SECONDS=${SPT_FUZZ_SECONDS:-20}
run() {
  name=${2:-$(basename "$1")}
  log="$BUILD/tests/$name.log"
  t0=$(date +%s)
  if [ "${SPC_VALGRIND:-0}" = 1 ]; then
    CK_FORK=no valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect \
      --error-exitcode=99 --trace-children=no "$1" >"$log" 2>&1
  else
    ${WRAP:-} "$1" >"$log" 2>&1
  fi
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [ $rc -eq 77 ]; then
    skip=$((skip + 1)); echo "SKIP $name: $(tail -n 1 "$log")"
  elif [ $rc -eq 0 ]; then
    pass=$((pass + 1)); echo "PASS $name: $(grep -E '^[0-9]+%: Checks' "$log" | tail -n 1) [${secs} s]"
  else
    fail=$((fail + 1)); failed="$failed $name"
    echo "FAIL $name (exit $rc, ${secs} s), last lines of $log:"; tail -n 30 "$log" | sed 's/^/    /'
  fi
}
for t in "$BUILD"/tests/unit_*; do
  [ -x "$t" ] || continue
  [ "$ONLY" = client ] && case "$t" in *unit_frame*|*unit_client*) ;; *) continue;; esac
  run "$t"
done
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  [ "$ONLY" = client ] && case "$t" in *test_allgather*|*test_wait_lock*) ;; *) continue;; esac
  run "$t"
done
# The op suites again across 3 daemons peering over UCX on loopback tcp
# (rank r on node r % 3, worlds 3 and 6): the multi-node suite; and the
# point-to-point suite likewise (pairs across nodes and within one, a
# killed node).
for t in test_ops_copy test_ops_reduce test_p2p; do
  [ -x "$BUILD/tests/$t" ] && [ "$ONLY" != client ] || continue
  SPT_NODES=3 run "$BUILD/tests/$t" "multinode_${t#test_}"
done
# At scale: 16 daemons, world 64 (tests/integ/multinode_scale.sh): the op
# suites, split groups, and a node killed under a world-64 group.
if [ -x "$BUILD/tests/test_ops_copy" ] && [ "$ONLY" != client ]; then
  run "$(dirname "$0")/integ/multinode_scale.sh" multinode_scale
fi
# The op suites again with every op on the serial engine (--mover serial,
# daemon/engine/engine_serial.c): an engine added through the table alone runs
# them unchanged.
for t in test_ops_copy test_ops_reduce; do
  [ -x "$BUILD/tests/$t" ] && [ "$ONLY" != client ] || continue
  SPT_MOVER=serial run "$BUILD/tests/$t" "serial_${t#test_}"
done
# The GPU suites again on spcsim, the CUDA/NCCL simulator (tests/gpusim),
# when the build has it: 4 simulated GPUs, strict CUDA/NCCL rules, the
# same production binaries. Counted apart from a real GPU's run above.
# simulated_multinode_gpu: every GPU op case on device tensors in groups
# across 3 daemons; it fails (SPC_EUNSUPPORTED) until device tensors across
# nodes are supported (README, "Not yet").
if [ -f "$BUILD/gpusim/libcudart.so.13" ] && [ "$ONLY" != client ]; then
  for t in tests/test_gpu_ops tests/test_gpu_errors tests/test_gpu_cumem \
    tests/test_gpu_order tests/test_gpu_sym \
    tests/test_gpu_split_nodes tests/test_gpu_restart \
    tests/test_gpu_multinode gpusim/sim_rules; do
    [ -x "$BUILD/$t" ] || continue
    n=$(basename "$t")
    case $n in
    test_gpu_multinode) name=simulated_multinode_gpu ;;
    *) name=simulated_${n#test_} ;;
    esac
    WRAP="sh $(dirname "$0")/gpusim/simrun.sh $BUILD" run "$BUILD/$t" "$name"
  done
fi
echo "suites: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] || { echo "failed:$failed"; exit 1; }
