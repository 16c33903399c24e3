#!/bin/sh
# Run a program on spcsim, the CUDA/NCCL simulator built under
# $BUILD/gpusim: its libcudart/libcuda/libnccl come first in the library
# path, 4 simulated GPUs of 8 GiB each (memory is only used as it is touched), memory counted across the
# processes of the run, a non-empty leak report at exit is a failure, and
# spcolld may not block on pageable async copies, nor make a call that may
# block on the GPU or other ranks on its main thread (its event loop
# serves every client; sim.h, sim_no_block), and no program may have NCCL
# operations of two communicator cliques in flight at once on one GPU
# (nccl-concurrent-comms; =0 turns it off). UCX's memory hooks are
# off: they would catch spcolld's munmap before the simulator's check
# (an IPC mapping may only be undone with cudaIpcCloseMemHandle).
# Usage: tests/gpusim/simrun.sh BUILD PROGRAM [ARGS...]
BUILD=$1
shift
state=$(mktemp "${TMPDIR:-/tmp}/spcsim-state.XXXXXX") || exit 1
contexts=$(mktemp "${TMPDIR:-/tmp}/spcsim-contexts.XXXXXX") || exit 1
trap 'rm -f "$state" "$contexts"' EXIT
LD_LIBRARY_PATH="$(cd "$BUILD/gpusim" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
SPCSIM_GPUS=${SPCSIM_GPUS:-4} SPCSIM_GPU_MEM=${SPCSIM_GPU_MEM:-8G} \
SPCSIM_STATE=$state SPCSIM_LEAKS_FATAL=1 SPCSIM_CONTEXT_LOG=$contexts \
SPCSIM_FORBID_PAGEABLE_ASYNC=${SPCSIM_FORBID_PAGEABLE_ASYNC:-spcolld} \
SPCSIM_FORBID_SYNC=${SPCSIM_FORBID_SYNC:-spcolld} \
SPCSIM_FORBID_CONCURRENT_COMMS=${SPCSIM_FORBID_CONCURRENT_COMMS:-1} \
UCX_MEM_MMAP_HOOK_MODE=none "$@"
