#!/bin/sh
# The CUDA tensor suites (test_cuda_ops.py, test_device_path.py) with PyPI
# torch on spcsim, the CUDA/NCCL simulator of tests/gpusim: its libcudart
# and libnccl are preloaded, because torch's libraries find their bundled
# nvidia-* copies through RPATH, which the library path does not override
# (libcuda.so.1 is dlopened, so the library path is enough for it). Two
# simulated GPUs; spcolld's leak report at exit is fatal (torch's own
# stream pool and cached segments are never freed by design, so the
# trainers' reports are not); spcolld may neither block on pageable
# copies nor synchronize. The trainers' stream ops start 50 ms late
# (SPCSIM_SLOW_STREAMS), so an op not ordered after the caller's stream
# reads stale data nearly every time (test_cuda_ops.py's negative control
# shows the stream checks then fail). A simulated run is not a GPU result.
# Usage: tests/python/cuda_sim.sh BUILD PYTHON [pytest args...]
BUILD=$1
PY=$2
shift 2
sim=$(cd "$BUILD/gpusim" && pwd) || exit 1
state=$(mktemp "${TMPDIR:-/tmp}/spcsim-state.XXXXXX") || exit 1
trap 'rm -f "$state"' EXIT
LD_LIBRARY_PATH="$sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
LD_PRELOAD="$sim/libcudart.so.13 $sim/libnccl.so.2" \
SPCSIM_GPUS=2 SPCSIM_GPU_MEM=${SPCSIM_GPU_MEM:-4G} SPCSIM_STATE=$state \
SPCSIM_LEAKS_FATAL=spcolld SPCSIM_FORBID_PAGEABLE_ASYNC=spcolld \
SPCSIM_FORBID_SYNC=spcolld SPCSIM_SLOW_STREAMS=python:50000 \
UCX_MEM_MMAP_HOOK_MODE=none \
"$PY" -m pytest -q -rs -p no:cacheprovider "$@" \
  tests/python/test_device_path.py tests/python/test_cuda_ops.py
