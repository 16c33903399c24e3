#!/bin/sh
# The multi-node suites across network namespaces joined by veth links: 3
# namespaces spcns0..2 (10.77.0.1..3/24) on a bridge in namespace spcnsbr,
# one spcolld in each, UCX over tcp between them; clients in this namespace
# reach the daemons through their Unix sockets.
# Usage: scripts/multinode_netns.sh [BUILD_DIR] (NETNS_SUITES="test_..."
# for a subset). Needs root; prints why it skipped (exit 77) otherwise.
set -u
BUILD=${1:-build}
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (ip netns)"
command -v ip >/dev/null || skip "no ip command (iproute2)"
[ -x "$BUILD/tests/test_ops_copy" ] || { echo "build first: make all"; exit 1; }
cleanup() {
  for i in 0 1 2; do ip netns del "spcns$i" 2>/dev/null; done
  ip netns del spcnsbr 2>/dev/null
}
cleanup
trap cleanup EXIT INT TERM
ip netns add spcnsbr 2>/dev/null || skip "cannot create network namespaces here"
ip -n spcnsbr link add br0 type bridge || skip "no bridge support"
ip -n spcnsbr link set br0 up
for i in 0 1 2; do
  ip netns add "spcns$i" || exit 1
  ip link add "spcv$i" type veth peer name "spcb$i" || skip "no veth support"
  ip link set "spcv$i" netns "spcns$i"
  ip link set "spcb$i" netns spcnsbr
  ip -n spcnsbr link set "spcb$i" master br0 up
  ip -n "spcns$i" addr add "10.77.0.$((i + 1))/24" dev "spcv$i"
  ip -n "spcns$i" link set "spcv$i" up
  ip -n "spcns$i" link set lo up
done
export SPCOLLD_REAL="$PWD/$BUILD/bin/spcolld"
export SPCOLLD="$PWD/scripts/netns_spcolld.sh"
export SPT_NODE_HOSTS=10.77.0.1,10.77.0.2,10.77.0.3
export UCX_TLS=tcp
fail=0
for t in ${NETNS_SUITES:-test_ops_copy test_ops_reduce test_multinode_fault}; do
  if SPT_NODES=3 "$BUILD/tests/$t" > "$BUILD/tests/netns_$t.log" 2>&1; then
    echo "PASS netns $t: $(grep -E '^[0-9]+%: Checks' "$BUILD/tests/netns_$t.log" | tail -n 1)"
  else
    echo "FAIL netns $t (log: $BUILD/tests/netns_$t.log)"; tail -n 20 "$BUILD/tests/netns_$t.log"
    fail=1
  fi
done
exit $fail
