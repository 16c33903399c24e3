#!/bin/sh
# Start spcolld inside network namespace spcns<I>, I being its --node-index
# (used by scripts/multinode_netns.sh as SPCOLLD). ip netns exec execs the
# daemon, so the caller's pid is the daemon's.
idx=0
prev=""
for a in "$@"; do
  [ "$prev" = "--node-index" ] && idx=$a
  prev=$a
done
exec ip netns exec "spcns$idx" "${SPCOLLD_REAL:?}" "$@"
