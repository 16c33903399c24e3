#!/bin/sh
# The GPU run: build here, run on a lent GPU machine (docs/gpu.md).
#
#   sh scripts/gpu_run.sh prepare [BUILD]   on the build machine (CUDA 13 and
#       NCCL under CUDA_HOME, no GPU needed): builds into BUILD (build-gpu),
#       stages the GPU binaries in .gpurun/ and the Debian libraries they
#       load in .devlibs/ (both git-ignored through .git/info/exclude), and
#       prints the device command to use.
#   sh scripts/gpu_run.sh run [tests|python|bench|handover|all]   on the
#       GPU machine, from the repository root, with .gpurun and .devlibs
#       carried there: the GPU suites, the CUDA tensor suites from Python
#       (the machine's own torch), the benchmark and the hand-over
#       benchmark (plain and under MPS), every log under $OUT;
#       `run compare`: the benchmark to 64 MiB (BENCH_MAX) with stream
#       flags and with events, plain and under MPS
#       (./gpu-out when unset), a summary at the end.
#   sh scripts/gpu_run.sh sim [tests|bench|all] [BUILD]   here, on spcsim
#       (the CUDA/NCCL simulator of tests/gpusim, built by make): the same
#       run end to end from BUILD (build), every line marked "simulated":
#       what it shows is that the path works, never how fast a GPU is.
#
# libnccl is not copied (218 MB): the GPU machine has it in its Python
# wheel (nvidia.nccl). libcudart.so.13 is copied: the wheel's runtime may
# be another major version.
set -u

stage_bins="bin/spcolld bin/spcollctl bin/spcoll-gpu-bench bin/spcoll-gpu-handover"
stage_tests="unit_daemon_cuda_desc unit_client_cuda_abi test_gpu_absent \
test_gpu_errors test_gpu_cumem test_gpu_ops test_gpu_order test_gpu_sym \
test_gpu_multinode"

exclude() {
  f=.git/info/exclude
  mkdir -p .git/info
  grep -qx "$1" "$f" 2>/dev/null || echo "$1" >> "$f"
}

prepare() {
  build=${1:-build-gpu}
  case "$(make --no-print-directory config)" in
    *"cuda: found"*) ;;
    *) echo "gpu_run: CUDA not found under CUDA_HOME: nothing to stage" >&2
       exit 1 ;;
  esac
  exclude "/$build/"
  exclude "/.gpurun/"
  exclude "/.devlibs/"
  make -j"$(nproc)" --no-print-directory BUILD="$build" all || exit 1
  rm -rf .gpurun .devlibs
  mkdir -p .gpurun/bin .gpurun/tests .devlibs
  for b in $stage_bins; do cp "$build/$b" .gpurun/bin/ || exit 1; done
  for t in $stage_tests; do cp "$build/tests/$t" .gpurun/tests/ || exit 1; done
  mkdir -p .gpurun/lib
  cp -L "$build/lib/libspclient.so.1" .gpurun/lib/ || exit 1
  # What the binaries load from Debian, but glibc itself, the C++ runtime
  # (the driver may want a newer one than Debian's), the driver and NCCL.
  for b in .gpurun/bin/* .gpurun/tests/* .gpurun/lib/*; do ldd "$b"; done |
    awk '/=> \// { print $3 }' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libnccl)\.so' |
    while read -r lib; do cp -L "$lib" .devlibs/; done
  ucx=$(dirname "$(ldd .gpurun/bin/spcolld | awk '/libucs\.so/ { print $3 }')" 2>/dev/null)
  if [ -n "$ucx" ] && [ -d "$ucx/ucx" ]; then
    cp -rL "$ucx/ucx" .devlibs/ucx
  fi
  strip --strip-debug .gpurun/bin/* .gpurun/tests/* .gpurun/lib/* \
    .devlibs/*.so* 2>/dev/null
  echo "staged:"; du -sh .gpurun .devlibs
  ls .devlibs
  cat <<EOF

device command (carry [".gpurun", ".devlibs"]):
  sh scripts/gpu_run.sh run all
EOF
}

# The folder holding the Python wheel's libnccl.so.2 (nvidia-nccl-*), where
# the wheels of CUDA 12 (nvidia/nccl/lib) or 13 put it.
nccl_dir() {
  python3 - <<'PY' 2>/dev/null
import glob, os, site
for d in site.getsitepackages():
    for f in sorted(glob.glob(os.path.join(d, "nvidia", "**", "libnccl.so.2"),
                              recursive=True)):
        print(os.path.dirname(f))
        raise SystemExit
PY
}

# The CUDA tensor suites from Python with the machine's own torch, against
# the staged spcolld and libspclient (the GPU machine only).
run_python() {
  start=$(date +%s)
  SPCOLL_LIB="$PWD/$stage/lib/libspclient.so.1" SPCOLLD="$SPCOLLD" \
  PYTHONPATH="$PWD/client/python" PYTHONDONTWRITEBYTECODE=1 \
    timeout 300 python3 -m pytest -q -rs -p no:cacheprovider \
    tests/python/test_device_path.py tests/python/test_cuda_ops.py \
    > "$OUT/python_cuda.log" 2>&1
  rc=$?
  echo "python cuda suites (exit $rc, $(( $(date +%s) - start )) s): $(tail -n 1 "$OUT/python_cuda.log")" |
    tee -a "$summary"
}

# The benchmark to 64 MiB (BENCH_MAX) with stream flags and with events
# (SPCOLL_GPU_ORDER=events), plain and under MPS where the machine has it:
# what queue and return changes (GPU machine only).
run_compare() {
  base=$OUT
  for order in flags events; do
    OUT=$base/$order SPCOLL_GPU_ORDER=$order BENCH_MAX=${BENCH_MAX:-64M} \
      run bench > /dev/null
    echo "compare: $order" | tee -a "$base/summary.txt"
    cat "$base/$order/gpu_bench.txt" | tee -a "$base/summary.txt"
  done
  command -v nvidia-cuda-mps-control > /dev/null || return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/spc-mps CUDA_MPS_LOG_DIRECTORY=/tmp/spc-mps
  mkdir -p /tmp/spc-mps
  nvidia-cuda-mps-control -d || return 0
  for order in flags events; do
    OUT=$base/mps_$order SPCOLL_GPU_ORDER=$order \
      BENCH_MAX=${BENCH_MAX:-64M} run bench > /dev/null
    echo "compare under MPS: $order" | tee -a "$base/summary.txt"
    cat "$base/mps_$order/gpu_bench.txt" | tee -a "$base/summary.txt"
  done
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# The hand-over benchmark (GPU machine only), plain and, where the machine
# has it, under MPS (every process then an MPS client).
run_handover() {
  timeout 120 "$bins/spcoll-gpu-handover" > "$OUT/gpu_handover.txt" 2>&1
  echo "handover exit $?" | tee -a "$summary"
  cat "$OUT/gpu_handover.txt"
  command -v nvidia-cuda-mps-control > /dev/null || return 0
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/spc-mps CUDA_MPS_LOG_DIRECTORY=/tmp/spc-mps
  mkdir -p /tmp/spc-mps
  nvidia-cuda-mps-control -d || return 0
  timeout 120 "$bins/spcoll-gpu-handover" handover > "$OUT/gpu_handover_mps.txt" 2>&1
  echo "handover under MPS exit $?" | tee -a "$summary"
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  cat "$OUT/gpu_handover_mps.txt"
}

run() {
  what=${1:-all}
  if [ "${SIM:-0}" = 1 ]; then
    # spcsim: the build's own binaries, each suite that needs a GPU run
    # through simrun.sh (the stand-in libraries first in the path).
    b=${2:-build}
    OUT=${OUT:-$PWD/gpu-out-sim}
    bins=$b/bin tests=$b/tests label="simulated "
    max=${SIM_MAX_BYTES:-16M}
    [ -f "$b/gpusim/libcudart.so.13" ] ||
      { echo "gpu_run: no simulator under $b/gpusim (make all)" >&2; exit 1; }
    cp "$b/gpusim/sim_rules" "$b/tests/sim_rules" || exit 1
    export SPCOLLD="$PWD/$b/bin/spcolld"
  else
    OUT=${OUT:-$PWD/gpu-out}
    # GPURUN: another staged build to run (an earlier one, to compare).
    stage=${GPURUN:-.gpurun}
    bins=$stage/bin tests=$stage/tests label="" max=${BENCH_MAX:-1G}
    nccl=$(nccl_dir)
    export LD_LIBRARY_PATH="$PWD/.devlibs${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export UCX_MODULE_DIR="$PWD/.devlibs/ucx"
    export SPCOLLD="$PWD/$stage/bin/spcolld"
  fi
  mkdir -p "$OUT"
  export SPCOLL_GPU_LOGS=1 # the daemons' logs go into each suite's log
  summary="$OUT/summary.txt"
  : > "$summary"
  if [ "${SIM:-0}" = 1 ]; then
    {
      date -u
      echo "SIMULATED: no GPU; spcsim (tests/gpusim) stands in for libcuda,"
      echo "libcudart and libnccl: results show the path works, numbers are"
      echo "not GPU measurements"
      ldd "$SPCOLLD"
    } > "$OUT/device.txt" 2>&1
  else
    {
      date -u
      nvidia-smi -L
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv
      echo "nccl from: ${nccl:-not found (python3 nvidia.nccl)}"
      ldd "$SPCOLLD"
    } > "$OUT/device.txt" 2>&1
  fi
  head -n 4 "$OUT/device.txt" | tee -a "$summary"
  if [ "$what" = all ] || [ "$what" = tests ]; then
    list=$stage_tests
    [ "${SIM:-0}" = 1 ] && list="unit_daemon_cuda_desc unit_client_cuda_abi \
test_gpu_absent sim:test_gpu_errors sim:test_gpu_cumem sim:test_gpu_ops \
sim:test_gpu_order sim:test_gpu_sym sim:test_gpu_multinode sim:sim_rules"
    for t in $list; do
      wrap=""
      case $t in
        sim:*) t=${t#sim:}; wrap="sh tests/gpusim/simrun.sh $b" ;;
      esac
      start=$(date +%s)
      timeout 300 $wrap "$tests/$t" > "$OUT/$t.log" 2>&1
      rc=$?
      case $rc in
        0) verdict=PASS ;;
        77) verdict=SKIP ;;
        *) verdict=FAIL ;;
      esac
      echo "$label$verdict $t (exit $rc, $(( $(date +%s) - start )) s): $(grep -E '^[0-9]+%: Checks|^skipped' "$OUT/$t.log" | tail -n 1)" |
        tee -a "$summary"
    done
  fi
  if [ "${SIM:-0}" != 1 ] && { [ "$what" = all ] || [ "$what" = python ]; }; then
    run_python
  fi
  if [ "$what" = all ] || [ "$what" = bench ]; then
    wrap=""
    [ "${SIM:-0}" = 1 ] && wrap="sh tests/gpusim/simrun.sh $b"
    # BENCH_MOVER: the daemon's --mover for the benchmark (auto).
    m=${BENCH_MOVER:-auto} f="$OUT/gpu_bench${BENCH_MOVER:+_$BENCH_MOVER}"
    timeout 300 $wrap "$bins/spcoll-gpu-bench" --ranks 4 \
      --min-bytes "${BENCH_MIN:-1M}" \
      --max-bytes "$max" --mover "$m" --csv "$f.csv" > "$f.txt" 2> "$f.err"
    echo "${label}bench (mover $m) exit $?" | tee -a "$summary"
    cat "$f.txt"
    # The same points in symmetric buffers: the ranks' own streams, no
    # daemon (docs/gpu-symmetric.md).
    f="$OUT/gpu_bench_symmetric"
    timeout 300 $wrap "$bins/spcoll-gpu-bench" --ranks 4 \
      --min-bytes "${BENCH_MIN:-1M}" --max-bytes "$max" --symmetric \
      --csv "$f.csv" > "$f.txt" 2> "$f.err"
    echo "${label}bench (symmetric buffers) exit $?" | tee -a "$summary"
    cat "$f.txt"
  fi
  if [ "${SIM:-0}" != 1 ] && { [ "$what" = all ] || [ "$what" = handover ]; }; then
    run_handover
  fi
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) shift
    if [ "${1:-}" = compare ]; then
      OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"; run_compare
    else run "$@"; fi ;;
  sim) shift; SIM=1 run "$@" ;;
  *) echo "usage: $0 prepare [BUILD] | run [tests|python|bench|handover|all] |" \
       "sim [tests|bench|all] [BUILD]" >&2; exit 2 ;;
esac
